"""GPU telemetry check: load a real NVIDIA GPU in steps and show what our NVML sampler saw.

Needs an NVIDIA GPU, its driver, PyTorch with CUDA, and nvidia-ml-py; no network. Takes about 2.5
minutes with the defaults (≤ 5 minutes by design):

    python benchmarks/gpu_telemetry_check.py [--step-seconds 20] [--record nvml_trace.json]

Steps: idle, then bf16 matmul loops of rising size on cuda:0 (the largest held longer, so a power
wall has the 30 s it needs to show), then a step that fills 93 % of GPU memory. Telemetry runs through
the same ``TelemetryCollector`` + ``GpuSampler`` + ``PynvmlBackend`` that ``knee find`` uses. It prints
per step: achieved TFLOP/s, power (mean, max, limit), SM clock (mean, min, max), memory, utilisation,
temperature, throttle reasons, then the verdicts that fired, then self-checks (exit 1 if one fails).
``--record`` saves every NVML reading as a replay file for tests (tests/telemetry/data/).
Exit codes: 0 checks passed, 1 a check failed, 2 cannot run here (no torch / CUDA / NVML).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from llm_knee.analysis.verdicts import client_bound, memory_pressure, power_wall
from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.client import LoopLagSampler
from llm_knee.telemetry.gpu import GpuSampler, PynvmlBackend, RecordingNvmlBackend
from llm_knee.telemetry.host import HostSampler
from llm_knee.telemetry.sampler import TelemetryCollector
from llm_knee.telemetry.summarize import LevelWindow, summarize_levels

MEMORY_FILL_FRACTION = 0.93


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    seconds: float
    matmul_n: int = 0  # 0: no compute
    fill_memory: bool = False


@dataclass(frozen=True, slots=True)
class StepResult:
    step: Step
    t0_ns: int
    t1_ns: int
    tflops: float


def plan_steps(sizes: list[int], step_s: float, hold_s: float) -> list[Step]:
    steps = [Step("idle", min(step_s, 10.0))]
    for i, n in enumerate(sizes):
        steps.append(Step(f"matmul {n}", hold_s if i == len(sizes) - 1 else step_s, n))
    steps.append(Step(f"fill {MEMORY_FILL_FRACTION:.0%} memory + matmul 4096", min(step_s, 15.0), 4096, True))
    return steps


def run_load(torch: Any, steps: list[Step], clock: Any, out: list[StepResult], failed: list[BaseException]) -> None:
    """The GPU load, in a plain thread so the sampler's event loop stays free."""
    try:
        dev = torch.device("cuda:0")
        for step in steps:
            t0 = clock()
            end = time.monotonic() + step.seconds
            flops = 0.0
            held: list[Any] = []
            if step.fill_memory:
                free, total = torch.cuda.mem_get_info(dev)
                extra = int(MEMORY_FILL_FRACTION * total) - (total - free)
                if extra > 0:
                    held.append(torch.empty(extra, dtype=torch.uint8, device=dev))
            if step.matmul_n:
                n = step.matmul_n
                a = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
                b = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
                torch.cuda.synchronize()
                started = time.perf_counter()
                c = a @ b
                torch.cuda.synchronize()
                batch = max(1, int(0.05 / max(time.perf_counter() - started, 1e-6)))
                began = time.perf_counter()
                iters = 0
                while time.monotonic() < end:
                    for _ in range(batch):
                        c = a @ b
                    torch.cuda.synchronize()
                    iters += batch
                flops = 2.0 * n**3 * iters / (time.perf_counter() - began)
                del a, b, c
            else:
                time.sleep(max(0.0, end - time.monotonic()))
            out.append(StepResult(step, t0, clock(), flops / 1e12))
            held.clear()
            torch.cuda.empty_cache()
    except BaseException as exc:  # reported by the main thread, which owns the exit code
        failed.append(exc)


def _get(summary: dict[str, dict[str, float]], name: str, gpu: str, stat: str) -> float:
    return summary.get(f"{name}{{gpu={gpu}}}", {}).get(stat, float("nan"))


def report(results: list[StepResult], samples: list[TelemetrySample], interval_s: float) -> int:
    windows = [LevelWindow(i, float(i), r.t0_ns, r.t1_ns) for i, r in enumerate(results)]
    summaries = summarize_levels(samples, windows)
    gpus = sorted({s.labels["gpu"] for s in samples if s.source == "gpu"})
    # The loaded GPU is the busiest one in the largest matmul step (NVML and CUDA may order GPUs apart).
    big = max(range(len(results)), key=lambda i: results[i].step.matmul_n if not results[i].step.fill_memory else 0)
    gpu = max(gpus, key=lambda g: _get(summaries[big], names.GPU_SM_UTIL_PCT, g, "mean"))
    print(f"\nGPU {gpu} (NVML index), {len(samples)} samples, interval {interval_s:g} s\n")
    header = (
        f"{'step':<34}{'s':>5}{'TFLOP/s':>9}{'W mean':>8}{'W max':>7}{'limit':>7}{'SM MHz':>8}"
        f"{'min':>6}{'max':>6}{'mem GiB':>9}{'mem %':>7}{'SM %':>6}{'memBW%':>7}{'°C':>5}  throttled (share)"
    )
    print(header)
    print("-" * len(header))
    for i, r in enumerate(results):
        s = summaries[i]
        throttles = sorted(
            (
                (k.split("{")[0].removeprefix(names.GPU_THROTTLE_PREFIX), v["mean"])
                for k, v in s.items()
                if k.startswith(names.GPU_THROTTLE_PREFIX) and k.endswith(f"{{gpu={gpu}}}") and v["mean"] > 0
            ),
            key=lambda kv: -kv[1],
        )
        print(
            f"{r.step.name:<34}{(r.t1_ns - r.t0_ns) / 1e9:>5.0f}{r.tflops:>9.1f}"
            f"{_get(s, names.GPU_POWER_W, gpu, 'mean'):>8.0f}{_get(s, names.GPU_POWER_W, gpu, 'max'):>7.0f}"
            f"{_get(s, names.GPU_POWER_LIMIT_W, gpu, 'max'):>7.0f}{_get(s, names.GPU_SM_CLOCK_MHZ, gpu, 'mean'):>8.0f}"
            f"{_min(samples, names.GPU_SM_CLOCK_MHZ, gpu, r):>6.0f}{_get(s, names.GPU_SM_CLOCK_MHZ, gpu, 'max'):>6.0f}"
            f"{_get(s, names.GPU_MEMORY_USED_BYTES, gpu, 'max') / 2**30:>9.1f}"
            f"{100 * _get(s, names.GPU_MEMORY_USED_FRAC, gpu, 'max'):>7.1f}"
            f"{_get(s, names.GPU_SM_UTIL_PCT, gpu, 'mean'):>6.0f}{_get(s, names.GPU_MEM_UTIL_PCT, gpu, 'mean'):>7.0f}"
            f"{_get(s, names.GPU_TEMPERATURE_C, gpu, 'max'):>5.0f}  "
            + (", ".join(f"{n} {share:.0%}" for n, share in throttles) or "-")
        )

    print("\nVerdicts (default thresholds):")
    fired = [v for v in (power_wall(samples, windows), memory_pressure(samples, windows)) if v is not None]
    fired += client_bound(samples, windows)
    for v in fired:
        print(f"  {v.name} at step '{results[v.level_index].step.name}': {v.evidence}")
    if not fired:
        print("  none")

    failures: list[str] = []
    idle = summaries[0]
    for i, r in enumerate(results):
        n = _get(summaries[i], names.GPU_POWER_W, gpu, "n")
        expected = (r.t1_ns - r.t0_ns) / 1e9 / interval_s
        if not n >= 0.7 * expected:
            failures.append(f"step '{r.step.name}': {n:.0f} GPU readings, expected about {expected:.0f}")
    busy = summaries[big]
    if not _get(busy, names.GPU_SM_UTIL_PCT, gpu, "mean") >= 80:
        failures.append(f"SM utilisation only {_get(busy, names.GPU_SM_UTIL_PCT, gpu, 'mean'):.0f} % under matmul")
    if not _get(busy, names.GPU_POWER_W, gpu, "mean") > _get(idle, names.GPU_POWER_W, gpu, "mean") + 50:
        failures.append("power under matmul is not 50 W above idle")
    max_clock = _get(busy, names.GPU_SM_CLOCK_MAX_MHZ, gpu, "max")
    if not 0 < _get(busy, names.GPU_SM_CLOCK_MHZ, gpu, "max") <= 1.05 * max_clock:
        failures.append(f"SM clock readings outside (0, {max_clock:.0f} MHz]")
    mem = memory_pressure(samples, windows)
    if mem is None or not results[mem.level_index].step.fill_memory:
        failures.append("the memory verdict did not fire at the memory-fill step")
    print()
    for f in failures:
        print(f"CHECK FAILED: {f}")
    print("CHECK ok" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


def _min(samples: list[TelemetrySample], name: str, gpu: str, r: StepResult) -> float:
    values = [s.value for s in samples if s.name == name and s.labels.get("gpu") == gpu and r.t0_ns <= s.t_ns < r.t1_ns]
    return min(values) if values else float("nan")


async def run(args: argparse.Namespace, torch: Any) -> int:
    backend = RecordingNvmlBackend(PynvmlBackend(), clock=time.monotonic)
    samples: list[TelemetrySample] = []
    collector = TelemetryCollector(
        [GpuSampler(backend), HostSampler(), LoopLagSampler()], samples.append, interval_s=args.interval
    )
    statuses = await collector.start()
    if not statuses["gpu"].available:
        await collector.stop()
        print(f"gpu_telemetry_check: cannot read the GPU through NVML: {statuses['gpu'].reason}", file=sys.stderr)
        return 2
    print(f"NVML: {statuses['gpu'].detail}; torch {torch.__version__}, cuda:0 = {torch.cuda.get_device_name(0)}")
    steps = plan_steps(args.sizes, args.step_seconds, args.hold_seconds)
    print(f"running {len(steps)} steps, about {sum(s.seconds for s in steps):.0f} s ...", flush=True)
    results: list[StepResult] = []
    failed: list[BaseException] = []
    thread = threading.Thread(target=run_load, args=(torch, steps, collector.clock, results, failed), daemon=True)
    thread.start()
    while thread.is_alive():
        await asyncio.sleep(0.2)
    await collector.stop()
    if failed:
        print(f"gpu_telemetry_check: the GPU load failed: {type(failed[0]).__name__}: {failed[0]}", file=sys.stderr)
        return 1
    if args.record:
        backend.write(
            args.record,
            note=f"recorded by benchmarks/gpu_telemetry_check.py on "
            f"{torch.cuda.get_device_name(0)}: steps {[s.name for s in steps]}",
        )
        print(f"NVML readings written to {args.record}")
    return report(results, samples, args.interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--step-seconds", type=float, default=20.0, help="length of each matmul step")
    parser.add_argument("--hold-seconds", type=float, default=40.0, help="length of the largest matmul step")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1024, 2048, 4096, 8192, 16384],
        help="matmul sizes, comma-separated",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval, seconds")
    parser.add_argument("--record", help="write the NVML readings as a replay file here")
    args = parser.parse_args(argv)
    total = sum(s.seconds for s in plan_steps(args.sizes, args.step_seconds, args.hold_seconds))
    if total > 280:
        parser.error(f"the steps would take {total:.0f} s; keep the check under 5 minutes")
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        print(
            "gpu_telemetry_check: PyTorch is not installed; this check needs torch with CUDA and an NVIDIA "
            "GPU (pip install torch). Nothing was run.",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available():
        print(
            "gpu_telemetry_check: PyTorch sees no CUDA GPU (no NVIDIA GPU or driver here, or a CPU-only "
            "torch build). Nothing was run.",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(run(args, torch))


if __name__ == "__main__":
    sys.exit(main())
