#!/usr/bin/env python3
"""Cross-check llm-knee against guidellm on one llama.cpp server, with the server's counters as referee.

    python benchmarks/crosscheck_guidellm/run.py [--levels 1,2,4,8] [--input-len 64 --output-len 64]
                                                 [--duration 20] [--warmup 3]

Run with the Python that has llm-knee installed. guidellm lives in this folder's own virtual
environment (``.venv``, made and filled from ``requirements.txt`` on first use), never in the package's.

One ``llama-server`` (fixed slots and threads) serves a tiny random-weight model written locally. For
each concurrency level both tools run in turn (the order alternates per level to cancel drift) with
the same fixed lengths, the same warm-up and the same measured duration. Throughout, a sampler reads
the server's ``/metrics`` and ``/slots`` four times a second, which gives the server's own count of
generated tokens at any instant; each tool's output tok/s is compared with the server's rate over that
tool's own measurement window. See README.md for what the columns mean and what was found.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from referee import CrosscheckError, ServerSampler, ServerTask, http_get, log_clock_offset, parse_server_log

from llm_knee.engines.llamacpp import find_or_build_llama_server
from llm_knee.engines.server import LlamaServer
from llm_knee.engines.tiny_gguf import write_tiny_llama_gguf

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements.txt"
TOKENIZER_TOOL = HERE / "gguf_tokenizer.py"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
TOLERANCE = 0.05
# Slack for a tool's start-up (guidellm imports torch and transformers: ~10-20 s on 2 cores) and drain.
RUN_SLACK_S = 180.0
GUIDELLM_START_DELAY_S = 4.0
GUIDELLM_WORKER_START_S = 1.5  # per worker process: spawn + imports, on 2 shared cores
GUIDELLM_DEFAULT_MAX_WORKERS = 10  # guidellm's default: one worker process per stream, at most this many
CLUSTER_S = 0.02

# --------------------------------------------------------------------------- benchmark environment


def pinned_guidellm(requirements: Path) -> str:
    for line in requirements.read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name.strip().lower() == "guidellm":
            return version.strip()
    raise CrosscheckError(f"{requirements} pins no guidellm version (expected a line guidellm==X.Y.Z)")


def venv_version(python: Path, package: str) -> str | None:
    if not python.exists():
        return None
    probe = f"import importlib.metadata as m; print(m.version({package!r}))"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_venv(venv: Path, requirements: Path) -> Path:
    """The guidellm executable of ``venv``, creating the environment and installing the pins if needed."""
    python = venv / "bin" / "python"
    want = pinned_guidellm(requirements)
    if venv_version(python, "guidellm") == want:
        return venv / "bin" / "guidellm"
    if not python.exists():
        print(f"creating the benchmark environment {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"installing {requirements.name} into {venv} (guidellm pulls in torch: several minutes)", flush=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)], check=False)
    got = venv_version(python, "guidellm")
    if done.returncode != 0 or got != want:
        raise CrosscheckError(f"pip could not install guidellm=={want} into {venv} (pip exit {done.returncode}, "
                              f"installed: {got}); see pip's message above")  # fmt: skip
    return venv / "bin" / "guidellm"


# --------------------------------------------------------------------------- one measurement per tool


@dataclass
class Measurement:
    tool: str
    level: int
    order: int  # 0 = ran first at this level
    output_tok_s: float
    ttft_p50_ms: float | None
    window: tuple[float, float]  # the tool's own measurement window, epoch seconds
    ok: int
    failed: int
    cut_at_end: int  # requests still running when the window closed (guidellm cancels them)
    prompt_tokens_server: float | None  # mean usage.prompt_tokens of successful requests
    output_tokens: float | None
    retries: int | None  # llm-knee only: retries after a reused connection failed
    wall: tuple[float, float]
    extra: dict[str, Any] = field(default_factory=dict)
    server_tok_s: float | None = None
    server_cached_tokens: float | None = None
    server_ttft_p50_ms: float | None = None
    server_cores: float | None = None  # CPU the server got during the window, in cores
    host_busy_cores: float | None = None  # CPU every process on the host used during the window
    host_steal_cores: float | None = None  # CPU the hypervisor withheld from this VM during the window
    server_tasks: int | None = None


@dataclass(frozen=True)
class Plan:
    url: str
    model_name: str
    input_len: int
    output_len: int
    warmup_s: float
    duration_s: float
    tokenizer_dir: Path
    guidellm: Path
    guidellm_workers: int
    out: Path


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_logged(argv: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> float:  # fmt: skip
    """Run a tool to completion with its output in ``log``; return the CPU seconds it and its children used.

    On these 2 shared cores a client's own CPU use is taken from the server, so it is worth knowing.
    """
    cpu_before = _children_cpu_s()
    with log.open("w") as handle:
        try:
            done = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout_s, env=env,
                                  cwd=cwd, check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise CrosscheckError(f"{argv[0]} ran past {timeout_s:.0f} s; log: {log}") from exc
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise CrosscheckError(f"{' '.join(argv[:3])} exited {done.returncode}; log {log} ends:\n{tail}")
    return _children_cpu_s() - cpu_before


def clustered(starts: list[float], within_s: float = CLUSTER_S) -> float | None:
    """Fraction of request starts with another start within ``within_s``: near 1 = users in lock-step."""
    t = sorted(starts)
    if len(t) < 2:
        return None
    near = [
        (i > 0 and t[i] - t[i - 1] <= within_s) or (i + 1 < len(t) and t[i + 1] - t[i] <= within_s)
        for i in range(len(t))
    ]
    return sum(near) / len(t)


def run_knee(plan: Plan, level: int, order: int, seed: int, lead_in: int | None) -> Measurement:
    """One ``knee find`` at ``level``; with ``lead_in``, that level runs first in the same invocation.

    Inside a ladder llm-knee starts a level's users spread over the previous level's median request
    time (fixed-length requests started together stay in lock-step and are prefilled as one batch);
    the first level of an invocation has no previous level and starts them together. The lead-in
    level makes the measured level ramp in as it does in an ordinary ``--levels 1,2,4,8`` sweep.
    """
    out = plan.out / f"knee-c{level}"
    levels = f"{lead_in},{level}" if lead_in is not None else str(level)
    argv = [
        sys.executable, "-m", "llm_knee", "find", "--url", plan.url, "--api", "completions",
        "--levels", levels, "--input-len", str(plan.input_len), "--output-len", str(plan.output_len),
        "--warmup", str(plan.warmup_s), "--min-duration", str(plan.duration_s),
        "--max-duration", str(plan.duration_s), "--warmup-requests", "0", "--no-telemetry",
        "--seed", str(seed), "--quiet", "--out", str(out),
    ]  # fmt: skip
    t0 = time.time()
    n_levels = 1 if lead_in is None else 2
    cpu = _run_logged(argv, plan.out / f"knee-c{level}.log", n_levels * (plan.warmup_s + plan.duration_s) + RUN_SLACK_S)
    t1 = time.time()
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    if len(runs) != 1:
        raise CrosscheckError(f"expected one llm-knee run directory under {out}, found {len(runs)}")
    spec = json.loads((runs[0] / "spec.json").read_text())
    walls = {int(s["session"]): int(s["wall_ns"]) for s in spec["sessions"]}
    lines = [json.loads(x) for x in (runs[0] / "levels.jsonl").read_text().splitlines() if x.strip()]
    found = [x for x in lines if x["level"] == level and x.get("status") == "complete"]
    if not found:
        raise CrosscheckError(f"llm-knee's {runs[0]}/levels.jsonl has no complete level {level}")
    line = found[-1]
    s = line["summary"]
    before = [x for x in lines if x["level_index"] < line["level_index"]]
    # What llm-knee's sweep derives its ramp from (load/sweep.py): the previous level's E2E p50, capped.
    ramp_s = min(before[-1]["summary"]["e2e_p50_ms"] / 1e3, plan.duration_s / 2) if before else 0.0
    records = [json.loads(x) for x in (runs[0] / "records.jsonl").read_text().splitlines() if x.strip()]
    sent = [r["sent_ns"] / 1e9 for r in records if r["level_index"] == line["level_index"] and not r["warmup"]]
    base = walls[int(line.get("session", 0))]
    window = ((base + line["window"]["start_ns"]) / 1e9, (base + line["window"]["end_ns"]) / 1e9)
    return Measurement(
        tool="llm-knee", level=level, order=order, output_tok_s=s["output_tok_s"], ttft_p50_ms=s["ttft_p50_ms"],
        window=window, ok=s["ok"], failed=s["requests"] - s["ok"], cut_at_end=0,
        prompt_tokens_server=s["mean_input_tokens"], output_tokens=s["mean_output_tokens"], retries=s["retries"],
        wall=(t0, t1),
        extra={"run_dir": str(runs[0]), "steady": s.get("steady"), "drain_s": s.get("drain_s"), "lead_in": lead_in,
               "ramp_s": ramp_s, "client_cpu_s": cpu, "clustered_starts": clustered(sent)},
    )  # fmt: skip


def run_guidellm(plan: Plan, level: int, order: int, seed: int, ramp_s: float) -> Measurement:
    """One ``guidellm run`` at ``level`` concurrent streams, their first requests spread over ``ramp_s``.

    The warm-up is the same ``--warmup`` seconds as llm-knee's, counted after the ramp.
    """
    out = plan.out / f"guidellm-c{level}"
    out.mkdir(parents=True, exist_ok=True)
    result = out / "benchmarks.json"
    backend = {"kind": "openai_http", "target": plan.url, "model": plan.model_name,
               "request_format": "/v1/completions", "http2": False}  # fmt: skip
    # guidellm's prompt_tokens include the BOS token it encodes; llm-knee's --input-len does not (the
    # server adds BOS to both), so guidellm is asked for one more to give the server the same prompt.
    data = {"kind": "synthetic_text", "prompt_tokens": plan.input_len + 1, "output_tokens": plan.output_len}
    argv = [
        str(plan.guidellm), "run",
        "--backend", json.dumps(backend),
        "--profile", json.dumps({"kind": "concurrent", "streams": [level], "rampup_duration": ramp_s,
                                 "warmup": ramp_s + plan.warmup_s}),
        "--constraint", json.dumps({"kind": "max_duration", "seconds": ramp_s + plan.warmup_s + plan.duration_s}),
        "--data", json.dumps(data),
        # Prompts are made on demand; the default prefetch of 4096 rows would burn a core meanwhile.
        "--data-loader", json.dumps({"kind": "pytorch", "prefetch_factor": 16}),
        "--tokenizer", json.dumps({"kind": "hf_auto", "model": str(plan.tokenizer_dir)}),
        "--seed", json.dumps({"kind": "static", "value": seed}),
        "--output", json.dumps({"kind": "json", "path": str(result)}),
        "--disable-console-interactive",
    ]  # fmt: skip
    workers = plan.guidellm_workers or min(level, GUIDELLM_DEFAULT_MAX_WORKERS)
    env = {
        **os.environ,
        **OFFLINE_ENV,
        # guidellm anchors its ramp (and its clock) at launch + this delay (default 1 s). Its worker processes
        # need longer than that to come up on 2 busy cores; then the ramp's offsets are already past when the
        # first requests go out, and all streams start together (and stay in lock-step).
        "GUIDELLM__SCHEDULER_START_DELAY_NON_DISTRIBUTED": str(
            GUIDELLM_START_DELAY_S + GUIDELLM_WORKER_START_S * workers
        ),
    }
    if plan.guidellm_workers:
        env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(plan.guidellm_workers)
    t0 = time.time()
    limit = ramp_s + plan.warmup_s + plan.duration_s + RUN_SLACK_S
    cpu = _run_logged(argv, plan.out / f"guidellm-c{level}.log", limit, env, out)
    t1 = time.time()
    bench = json.loads(result.read_text())["benchmarks"][0]
    m = bench["metrics"]
    totals = m["request_totals"]
    starts = [
        r["info"]["timings"]["request_start"]
        for group in ("successful", "incomplete", "errored")
        for r in bench["requests"].get(group, [])
        if r["info"]["timings"].get("request_start") is not None
    ]
    in_window = [t for t in starts if bench["start_time"] <= t < bench["end_time"]]
    first = sorted(
        (r["info"]["timings"] for g in ("successful", "incomplete", "errored") for r in bench["requests"].get(g, [])),
        key=lambda t: t.get("targeted_start") or math.inf,
    )[:level]
    # How late the first request of each stream went out against guidellm's own ramp schedule.
    late_ms = max((t["request_start"] - t["targeted_start"]) * 1e3 for t in first if t.get("targeted_start"))
    return Measurement(
        tool="guidellm", level=level, order=order,
        # "total" = successful + cancelled-at-end + errored streams, token arrivals inside the window:
        # the figure guidellm prints as Output Tokens Per Sec. See README for why "successful" is not it.
        output_tok_s=m["output_tokens_per_second"]["total"]["mean"],
        ttft_p50_ms=m["time_to_first_token_ms"]["successful"]["percentiles"]["p50"],
        window=(bench["start_time"], bench["end_time"]), ok=totals["successful"], failed=totals["errored"],
        cut_at_end=totals["incomplete"], prompt_tokens_server=m["prompt_token_count"]["successful"]["mean"],
        output_tokens=m["output_token_count"]["successful"]["mean"], retries=None, wall=(t0, t1),
        extra={"output_tok_s_successful_only": m["output_tokens_per_second"]["successful"]["mean"],
               "ttft_p50_all_ms": m["time_to_first_token_ms"]["total"]["percentiles"]["p50"],
               "workers": bench["config"]["strategy"].get("worker_count"), "ramp_s": ramp_s, "client_cpu_s": cpu,
               "clustered_starts": clustered(in_window), "first_starts_late_ms": late_ms,
               "e2e_p50_s": m["request_latency"]["successful"]["percentiles"]["p50"]},
    )  # fmt: skip


# --------------------------------------------------------------------------- driving and reporting


def warm_server(url: str, model: str, output_len: int, n: int = 3) -> list[float]:
    """A few requests before anything is measured, so neither tool pays for first-use costs.

    Returns when each was sent (epoch s): they also pin the server log's clock to the wall clock.
    """
    sent: list[float] = []
    for i in range(n):
        body = {"model": model, "prompt": f"warm up {i} " * 16, "max_tokens": output_len, "ignore_eos": True}
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        sent.append(time.time())
        with urllib.request.urlopen(req, timeout=120) as response:
            response.read()
    return sent


def referee(m: Measurement, sampler: ServerSampler) -> None:
    """The server's generated tokens per second over the tool's own window; its cache hits over the run."""
    sampler.wait_past(max(m.window[1], m.wall[1]))
    a, b = sampler.at(m.window[0]), sampler.at(m.window[1])
    m.server_tok_s = (b.generated - a.generated) / (b.t - a.t)
    m.server_cached_tokens = sampler.at(m.wall[1]).cached - sampler.at(m.wall[0]).cached
    m.server_cores = (b.server_cpu - a.server_cpu) / (b.t - a.t)
    m.host_busy_cores = (b.host_busy - a.host_busy) / (b.t - a.t)
    m.host_steal_cores = (b.host_steal - a.host_steal) / (b.t - a.t)


def server_ttft(m: Measurement, tasks: list[ServerTask], offset: float) -> None:
    """Median server-side time to first token of the tasks the server launched inside the tool's window."""
    a, b = m.window
    evals = [t.prompt_eval_ms for t in tasks if t.prompt_eval_ms is not None and a <= t.launched_s + offset < b]
    m.server_ttft_p50_ms = float(statistics.median(evals)) if evals else None
    m.server_tasks = len(evals)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def _yes(r: float | None) -> str:
    return "yes" if r is not None and abs(r - 1) <= TOLERANCE else "NO"


def _header(*cols: str) -> list[str]:
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]


def throughput_table(rows: list[tuple[Measurement, Measurement]]) -> str:
    lines = _header("conc", "knee tok/s", "guidellm tok/s", "knee/gl", "server@knee", "server@gl",
                    "knee/server", "gl/server", "drift-free knee/gl", "within 5 %: raw / drift-free")  # fmt: skip
    for k, g in rows:
        raw = _ratio(k.output_tok_s, g.output_tok_s)
        ks, gs = _ratio(k.output_tok_s, k.server_tok_s), _ratio(g.output_tok_s, g.server_tok_s)
        lines.append(
            f"| {k.level} | {_f(k.output_tok_s)} | {_f(g.output_tok_s)} | {_f(raw, '.3f')} | {_f(k.server_tok_s)} "
            f"| {_f(g.server_tok_s)} | {_f(ks, '.3f')} | {_f(gs, '.3f')} | {_f(_ratio(ks, gs), '.3f')} "
            f"| {_yes(raw)} / {_yes(_ratio(ks, gs))} |"
        )
    return "\n".join(lines)


def ttft_table(rows: list[tuple[Measurement, Measurement]]) -> str:
    lines = _header("conc", "knee TTFT p50 ms", "guidellm TTFT p50 ms", "knee/gl", "server@knee", "server@gl",
                    "knee - server", "gl - server", "drift-free knee/gl", "within 5 %: raw / drift-free")  # fmt: skip
    for k, g in rows:
        raw = _ratio(k.ttft_p50_ms, g.ttft_p50_ms)
        dk = None if k.ttft_p50_ms is None or k.server_ttft_p50_ms is None else k.ttft_p50_ms - k.server_ttft_p50_ms
        dg = None if g.ttft_p50_ms is None or g.server_ttft_p50_ms is None else g.ttft_p50_ms - g.server_ttft_p50_ms
        free = _ratio(_ratio(k.ttft_p50_ms, k.server_ttft_p50_ms), _ratio(g.ttft_p50_ms, g.server_ttft_p50_ms))
        lines.append(
            f"| {k.level} | {_f(k.ttft_p50_ms)} | {_f(g.ttft_p50_ms)} | {_f(raw, '.3f')} | {_f(k.server_ttft_p50_ms)} "
            f"| {_f(g.server_ttft_p50_ms)} | {_f(dk, '+.1f')} | {_f(dg, '+.1f')} | {_f(free, '.3f')} "
            f"| {_yes(raw)} / {_yes(free)} |"
        )
    return "\n".join(lines)


def details(rows: list[tuple[Measurement, Measurement]]) -> str:
    cols = ("conc", "tool", "ran", "window s", "ok", "failed", "cut at end", "prompt tok (server)", "output tok",
            "conn. retries", "cached prompt tok", "server tasks", "client CPU s", "clustered starts",
            "server cores", "host busy cores", "steal cores", "note")  # fmt: skip
    lines = _header(*cols)
    for pair in rows:
        for m in sorted(pair, key=lambda x: x.order):
            if m.tool == "guidellm":
                only = m.extra["output_tok_s_successful_only"]
                note = (
                    f"ramp {m.extra['ramp_s']:.2f} s (first starts <= {m.extra['first_starts_late_ms']:.0f} ms late), "
                    f"worker processes: {m.extra['workers']}; successful-only {only:.1f} tok/s"
                )
            else:
                note = f"ramp {m.extra['ramp_s']:.2f} s (lead-in c={m.extra['lead_in'] or '-'})"
            lines.append(
                f"| {m.level} | {m.tool} | {'1st' if m.order == 0 else '2nd'} | {m.window[1] - m.window[0]:.1f} "
                f"| {m.ok} | {m.failed} | {m.cut_at_end} | {_f(m.prompt_tokens_server)} | {_f(m.output_tokens)} "
                f"| {'-' if m.retries is None else m.retries} | {_f(m.server_cached_tokens, '.0f')} "
                f"| {'-' if m.server_tasks is None else m.server_tasks} | {m.extra['client_cpu_s']:.1f} "
                f"| {_f(m.extra['clustered_starts'], '.2f')} | {_f(m.server_cores, '.2f')} "
                f"| {_f(m.host_busy_cores, '.2f')} | {_f(m.host_steal_cores, '.2f')} | {note} |"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--levels", default="1,2,4,8", help="concurrency levels, e.g. 1,2,4,8")
    p.add_argument("--input-len", type=int, default=64, help="prompt tokens (without BOS)")
    p.add_argument("--output-len", type=int, default=64, help="output tokens (exact: ignore_eos)")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per level and tool")
    p.add_argument("--warmup", type=float, default=3.0, help="discarded seconds at the start of each run")
    p.add_argument("--slots", type=int, default=16, help="llama-server -np")
    p.add_argument("--threads", type=int, default=1, help="llama-server -t (1 leaves a core to the client)")
    p.add_argument(
        "--guidellm-workers",
        type=int,
        default=0,
        help="GUIDELLM__MAX_WORKER_PROCESSES; 0 = guidellm's default (one process per stream, at most 10)",
    )
    p.add_argument(
        "--shape",
        choices=("ramped", "together"),
        default="ramped",
        help="ramped: each tool starts a level's users spread over the previous level's median request time "
        "(llm-knee's ladder rule; guidellm's rampup_duration); together: all users start at once (see README)",
    )
    p.add_argument("--llama-server", help="llama-server binary (default: llm-knee's cached build)")
    p.add_argument("--venv", type=Path, default=HERE / ".venv", help="guidellm's virtual environment")
    p.add_argument("--out", type=Path, default=HERE / "runs", help="where the run directory is made")
    p.add_argument("--report", type=Path, help="only print the tables of an earlier run directory's results.json")
    args = p.parse_args(argv)
    try:
        args.level_list = [int(x) for x in args.levels.split(",") if x.strip()]
    except ValueError as exc:
        p.error(f"--levels must be whole numbers separated by commas, got {args.levels!r}")
        raise SystemExit(2) from exc
    if not args.level_list or min(args.level_list) < 1:
        p.error("--levels needs at least one concurrency >= 1")
    if args.duration <= 0 or args.warmup < 1:
        p.error("--duration must be positive and --warmup at least 1 s (guidellm reads < 1 as a fraction)")
    return args


def render(rows: list[tuple[Measurement, Measurement]]) -> str:
    return "\n\n".join((throughput_table(rows), ttft_table(rows), details(rows)))


def load_rows(results: Path) -> list[tuple[Measurement, Measurement]]:
    data = json.loads(results.read_text())
    return [(Measurement(**k), Measurement(**g)) for k, g in data["rows"]]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report is not None:
        print(render(load_rows(args.report / "results.json")))
        return 0
    started = time.time()
    guidellm = ensure_venv(args.venv, REQUIREMENTS)
    venv_python = args.venv / "bin" / "python"
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    model = write_tiny_llama_gguf(out / "model" / "tiny.gguf", n_embd=512, n_layer=8, n_ff=1536, n_head=8,
                                  n_head_kv=8)  # fmt: skip
    binary = find_or_build_llama_server(args.llama_server)
    ctx = args.slots * max(512, 2 * (args.input_len + args.output_len + 2))
    server = LlamaServer(binary, model, slots=args.slots, threads=args.threads, ctx_size=ctx,
                         log_path=out / "llama-server.log")  # fmt: skip
    with server:
        url = server.base_url
        tok = subprocess.run(
            [str(venv_python), str(TOKENIZER_TOOL), str(model), str(out / "tokenizer"), "--check-url", url,
             "--prompt-tokens", str(args.input_len + 1)],
            capture_output=True, text=True, env={**os.environ, **OFFLINE_ENV}, check=False, timeout=300,
        )  # fmt: skip
        if tok.returncode != 0:
            raise CrosscheckError(f"could not make a tokenizer from the GGUF:\n{tok.stderr[-3000:]}")
        tok_check = json.loads(tok.stdout.strip().splitlines()[-1])
        print(f"tokenizer check (HF conversion vs llama.cpp /tokenize): {json.dumps(tok_check['check'])}")
        model_name = json.loads(http_get(url + "/v1/models"))["data"][0]["id"]
        warm_sent = warm_server(url, model_name, args.output_len)
        plan = Plan(url, model_name, args.input_len, args.output_len, args.warmup, args.duration,
                    out / "tokenizer", guidellm, args.guidellm_workers, out)  # fmt: skip
        if server.pid is None:
            raise CrosscheckError("llama-server has no process id after start")
        sampler = ServerSampler(url, server.pid)
        sampler.start()
        sampler.wait_past(time.time())  # so that every run starts after the first sample
        rows: list[tuple[Measurement, Measurement]] = []
        try:
            for i, level in enumerate(args.level_list):
                knee_first = i % 2 == 0
                done: dict[str, Measurement] = {}
                for order, tool in enumerate(("knee", "guidellm") if knee_first else ("guidellm", "knee")):
                    print(f"c={level}: {tool} ({'1st' if order == 0 else '2nd'}) ...", flush=True)
                    seed = 1000 * (order + 1) + level
                    ramped = args.shape == "ramped" and i > 0
                    if tool == "knee":
                        m = run_knee(plan, level, order, seed, args.level_list[i - 1] if ramped else None)
                    else:
                        # llm-knee's rule: the previous level's median request time, at most half the duration.
                        ramp = min(rows[-1][1].extra["e2e_p50_s"], args.duration / 2) if ramped else 0.0
                        m = run_guidellm(plan, level, order, seed, ramp)
                    referee(m, sampler)
                    done[tool] = m
                    print(f"   {m.tool}: {m.output_tok_s:.1f} tok/s, TTFT p50 {_f(m.ttft_p50_ms)} ms; "
                          f"server {_f(m.server_tok_s)} tok/s over the same window", flush=True)  # fmt: skip
                rows.append((done["knee"], done["guidellm"]))
        finally:
            sampler.stop()
    tasks = parse_server_log((out / "llama-server.log").read_text(errors="replace"))
    offset = log_clock_offset(tasks, warm_sent)
    for pair in rows:
        for m in pair:
            server_ttft(m, tasks, offset)
    report = render(rows)
    print("\n" + report)
    meta = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "guidellm": pinned_guidellm(REQUIREMENTS), "llama_server": str(binary), "slots": args.slots,
        "threads": args.threads, "guidellm_workers": args.guidellm_workers, "shape": args.shape,
        "input_len": args.input_len,
        "output_len": args.output_len, "warmup_s": args.warmup, "duration_s": args.duration,
        "tokenizer_check": tok_check.get("check"), "sampler_failures": sampler.failures,
        "elapsed_s": time.time() - started,
    }  # fmt: skip
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": [[asdict(k), asdict(g)] for k, g in rows]},
                                                 indent=2))  # fmt: skip
    (out / "results.md").write_text(report + "\n")
    print(f"\n{len(rows)} levels in {meta['elapsed_s']:.0f} s; results: {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CrosscheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
