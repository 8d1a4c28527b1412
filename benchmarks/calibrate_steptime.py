"""Predicted vs published: the step-time model's error on every point of shared/data/published-measurements.md.

Run:  python benchmarks/calibrate_steptime.py [--max-num-seqs 256] [--search]

Sources (facts quoted in shared/data/published-measurements.md):
  A. SGLang repo, benchmark/benchmark_vllm_060/README.md: Llama-3.1-8B-Instruct BF16, 1 x A100-80G, ShareGPT,
     Poisson request rate 4 and 8 RPS, medians of E2E, TTFT, TPOT, ITL; offline output throughput.
  C. TensorRT-LLM repo, docs/source/performance/perf-overview.md: Llama-3.1-8B FP8, TP1, output tokens/s at
     maximum load on H100 and H200.

Closed-form estimators (the discrete-event simulator replaces them later):
  ITL (table A): one pure decode step with B = RPS x median E2E sequences (Little's law) each holding
    mean_prompt + mean_output / 2 tokens of context. SGLang runs prefill in separate batches, so its median
    ITL is a decode step.
  TPOT (table A): decode steps are interrupted by the prefill of each arriving prompt; per second the engine
    spends RPS x t_prefill(mean_prompt) on prefill, so TPOT = ITL / (1 - RPS x t_prefill).
  Saturation throughput (table C, and table A offline): B = min(max_num_seqs, KV capacity // (in + out))
    sequences in flight; each lives `out` decode steps, so every step admits B/out new prompts: a step holds
    B*in/out prefill tokens with (B/out) * in^2/2 attention pairs, and B decode tokens whose mean context is
    in + out/2. Output tokens/s = B / t_step.
Assumptions (stated, not fitted): ShareGPT mean prompt 215 and mean output 198 tokens (vLLM's
benchmark_serving on ShareGPT_V3 with 1000 prompts: 215,196 input and 198,343 output tokens with the Llama
tokenizer); table C runs an FP8 KV cache (TRT-LLM FP8 checkpoints quantize KV too) — printed both ways.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from llm_knee.catalog import DType, get_dtype, get_gpu, get_model
from llm_knee.plan.roofline import DEFAULT_EFFICIENCIES, Efficiencies, StepTimeModel

SHAREGPT_MEAN_PROMPT = 215
SHAREGPT_MEAN_OUTPUT = 198
MISS = 0.15


@dataclass(frozen=True)
class Point:
    label: str
    published: float
    predicted: float
    unit: str

    @property
    def rel_error(self) -> float:
        return (self.predicted - self.published) / self.published


def saturation_tok_s(m: StepTimeModel, isl: int, osl: int, max_num_seqs: int) -> tuple[float, int]:
    batch = min(max_num_seqs, m.kv_capacity_tokens(0.9) // (isl + osl))
    admits = batch / osl
    t = m.step_time_s(round(admits * isl), admits * isl * isl / 2.0, batch, round(batch * (isl + osl / 2.0)))
    return batch / t, batch


def table_a(eff: Efficiencies, max_num_seqs: int) -> list[Point]:
    m = StepTimeModel(get_model("Llama-3.1-8B"), get_gpu("a100-80g"), get_dtype("bf16"), eff=eff)
    ctx = SHAREGPT_MEAN_PROMPT + SHAREGPT_MEAN_OUTPUT // 2
    t_prefill = m.prefill_time_s(SHAREGPT_MEAN_PROMPT)
    points: list[Point] = []
    # (rps, median E2E ms, SGLang TPOT, SGLang ITL, vLLM TPOT, vLLM ITL for 10 tokens)
    rows = [(4, 1564, 13.17, 11.93, 14.14, 129.32), (8, 2175, 17.85, 14.41, 17.09, 158.63)]
    for rps, e2e_ms, sg_tpot, sg_itl, vl_tpot, vl_itl10 in rows:
        batch = round(rps * e2e_ms / 1000)
        itl = m.decode_step_time_s(batch, ctx) * 1e3
        busy = rps * t_prefill
        tpot = itl / (1.0 - busy)
        points += [
            Point(f"A100 BF16 {rps} RPS SGLang ITL (B={batch})", sg_itl, itl, "ms"),
            Point(f"A100 BF16 {rps} RPS SGLang TPOT", sg_tpot, tpot, "ms"),
            Point(f"A100 BF16 {rps} RPS vLLM TPOT", vl_tpot, tpot, "ms"),
            Point(f"A100 BF16 {rps} RPS vLLM ITL/10 (multi-step)", vl_itl10 / 10, itl, "ms"),
        ]
    tput, batch = saturation_tok_s(m, SHAREGPT_MEAN_PROMPT, SHAREGPT_MEAN_OUTPUT, max_num_seqs)
    points += [
        Point(f"A100 BF16 offline SGLang (B={batch})", 4281.5, tput, "tok/s"),
        Point(f"A100 BF16 offline vLLM (B={batch})", 4132.4, tput, "tok/s"),
    ]
    return points


TABLE_C = {
    (128, 128): (28312, 27911),
    (1000, 1000): (15220, 17744),
    (2048, 128): (3450, 3538),
    (5000, 500): (3459, 3902),
}


def table_c(eff: Efficiencies, max_num_seqs: int, kv: DType) -> list[Point]:
    points: list[Point] = []
    for (isl, osl), published in TABLE_C.items():
        for gpu_name, pub in zip(("h100", "h200"), published, strict=True):
            gpu = get_gpu(gpu_name)
            m = StepTimeModel(get_model("Llama-3.1-8B"), gpu, get_dtype("fp8"), kv_dtype=kv, eff=eff)
            tput, batch = saturation_tok_s(m, isl, osl, max_num_seqs)
            points.append(Point(f"{gpu.name} FP8 kv={kv.name} {isl}/{osl} (B={batch})", pub, tput, "tok/s"))
    return points


def all_points(eff: Efficiencies, max_num_seqs: int) -> list[Point]:
    return table_a(eff, max_num_seqs) + table_c(eff, max_num_seqs, get_dtype("fp8"))


def print_points(title: str, points: Iterable[Point]) -> None:
    print(title)
    print(f"  {'point':<48} {'published':>10} {'predicted':>10} {'error':>8}")
    misses = []
    for p in points:
        flag = "  MISS" if abs(p.rel_error) > MISS else ""
        print(f"  {p.label:<48} {p.published:>10.2f} {p.predicted:>10.2f} {p.rel_error:>+8.1%}{flag}")
        if flag:
            misses.append(p.label)
    print(f"  -> {len(misses)} point(s) miss by more than {MISS:.0%}" + (f": {'; '.join(misses)}" if misses else ""))
    print()


def score(points: list[Point]) -> float:
    return sum(abs(p.rel_error) for p in points) / len(points)


def search(max_num_seqs: int) -> Efficiencies:
    """Coarse grid, mean absolute relative error over all points decides.

    One compute efficiency serves prefill and decode: in a mixed step both kinds of tokens share the same
    GEMMs, and no published point separates them (letting them differ buys < 1 point of error).
    """
    best: tuple[float, Efficiencies] | None = None
    grid = itertools.product(
        (0.60, 0.65, 0.70, 0.75, 0.80, 0.85),
        (0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70),
        (0.0, 0.5e-3, 1.0e-3, 1.5e-3, 2.0e-3),
        (0.0, 10e-6, 20e-6),
    )
    for bw, compute, step, layer in grid:
        eff = Efficiencies(bw, compute, compute, step, layer)
        s = score(all_points(eff, max_num_seqs))
        if best is None or s < best[0]:
            best = (s, eff)
    assert best is not None
    print(f"grid search best: mean |error| {best[0]:.1%} with {best[1]}")
    print()
    return best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=256, help="batch cap of the saturation estimator")
    parser.add_argument("--search", action="store_true", help="grid-search the efficiencies (shows the fit)")
    args = parser.parse_args()
    eff = search(args.max_num_seqs) if args.search else DEFAULT_EFFICIENCIES
    print(f"efficiencies: {eff}")
    print(f"saturation batch cap max_num_seqs={args.max_num_seqs}\n")
    print_points("Table A (SGLang README, Llama-3.1-8B BF16, A100-80G, ShareGPT)", table_a(eff, args.max_num_seqs))
    print_points(
        "Table C (TRT-LLM perf overview, Llama-3.1-8B FP8, saturation)",
        table_c(eff, args.max_num_seqs, get_dtype("fp8")),
    )
    print_points("Table C sensitivity: BF16 KV cache", table_c(eff, args.max_num_seqs, get_dtype("bf16")))
    print(f"mean |error| over tables A and C: {score(all_points(eff, args.max_num_seqs)):.1%}")


if __name__ == "__main__":
    main()
