"""Simulated vs published: the discrete-event engine (the engine `knee simulate` runs) against the points of
shared/data/published-measurements.md. Prints each relative error, whether it is within 15 %, and for each
miss the likely reason.

Run:  python benchmarks/sim_accuracy.py [--seeds 3] [--duration 300]

Sources (quoted in shared/data/published-measurements.md):
  A. SGLang repo, benchmark/benchmark_vllm_060/README.md: Llama-3.1-8B-Instruct BF16 on 1 x A100-80G,
     ShareGPT prompts, Poisson arrivals at 4 RPS (1200 prompts) and 8 RPS (2400 prompts); median TTFT and
     TPOT of SGLang v0.3.0 and vLLM v0.6.0 (--num-scheduler-steps 10, --max_model_len 4096). Offline: 5000
     prompts at once, output tok/s.
  C. TensorRT-LLM repo, docs/source/performance/perf-overview.md: Llama-3.1-8B FP8, TP1, output tok/s at
     maximum load on H100 and H200, four fixed input/output pairs.

How each figure is simulated:
  A (online). simulate_open_loop with Poisson arrivals for --duration simulated seconds (300 = the published
     1200 prompts at 4 RPS) after 20 s of discarded warm-up, summarised by the measurement side's
     summarize_level; mean over --seeds seeds of the per-seed medians (the spread is printed).
     Engine: vLLM V1 defaults (max_num_seqs 256, max_num_batched_tokens 8192, chunked prefill on,
     gpu_memory_utilization 0.9) with max_model_len 4096 as in the published runs.
  A (offline). Closed loop far above the batch limit (512 users, so the queue is never empty) through the
     shared ladder (sim.ladder.simulate_ladder); output tok/s of the measured window.
  C. `knee simulate`'s own pipeline (simulate_cmd.prepare + simulate_profile) at 256 and 512 users with
     fixed lengths, FP8 weights and FP8 KV cache (TRT-LLM's FP8 checkpoints quantise KV too); the higher
     output tok/s of the two is the saturation figure. Batch cap: vLLM's default max_num_seqs 256
     (TRT-LLM picks its own maximum batch per length pair; not published on the page).

ShareGPT-like lengths (an assumption, stated because medians depend on it): prompt and output tokens each
lognormal (sigma 1.2 for prompts, 1.0 for outputs: ShareGPT first turns are short questions with a long
tail, answers less skewed), filtered as the SGLang/vLLM ShareGPT samplers filter (both >= 4 tokens,
prompt <= 1024, prompt + output <= 2048), with mu fitted so that the filtered means are 215 prompt and
198 output tokens (vLLM's benchmark_serving on ShareGPT_V3, 1000 prompts: 215,196 input and 198,343
output tokens; SGLang's offline row gives 4281.51 / 22.03 = 194 output tokens per request). A second run
with every request at the mean lengths shows how much the figures depend on that shape.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llm_knee.analysis.summary import Window, summarize_level
from llm_knee.sim.config import EngineConfig
from llm_knee.sim.ladder import LevelTiming, simulate_ladder
from llm_knee.sim.loop import RequestSampler
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import NS, SimConfig, fixed_lengths, simulate_open_loop
from llm_knee.sim.simulate_cmd import Profile, peak, prepare, simulate_profile
from llm_knee.workload.lengths import LengthDist

WITHIN = 0.15
MEAN_PROMPT, MEAN_OUTPUT = 215, 198
SIGMA_PROMPT, SIGMA_OUTPUT = 1.2, 1.0
MIN_LEN, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048
WARMUP_S = 20.0

# Why a point is likely to miss, by (figure, engine): what differs between the published run and the model.
REASONS = {
    ("ttft", "vLLM"): "vLLM 0.6.0 ran --num-scheduler-steps 10: an arrival waits for the running 10-step block "
    "(~5 decode steps on average) before its prefill; the simulated engine schedules every step (vLLM V1)",
    ("ttft", "SGLang"): "the published TTFT includes HTTP, tokenisation and detokenisation time the engine model "
    "does not have, and SGLang prefills in separate batches",
    ("tpot", "SGLang"): "SGLang runs each prefill as its own batch that pauses every decode; the simulated engine "
    "mixes prefill chunks into decode steps (vLLM V1 chunked prefill), which costs decodes less",
    ("tpot", "vLLM"): "vLLM 0.6.0 (chunked prefill off at max_model_len 4096) runs prefill-only steps that pause "
    "every decode; the simulated engine mixes prefill into decode steps",
    ("offline", ""): "the published engines' batch limits and prefill-first scheduling differ from vLLM V1's "
    "defaults; the bandwidth efficiency (0.65) is a single calibrated constant",
    ("saturation", ""): "TRT-LLM, not vLLM: its own maximum batch per length pair (not published; the simulation "
    "caps at max_num_seqs 256), fused FP8 kernels, and a bandwidth efficiency calibrated on A100 that H100/H200 "
    "likely beat",
}


@dataclass(frozen=True)
class Point:
    table: str
    label: str
    published: float
    simulated: float
    unit: str
    reason_key: tuple[str, str]
    spread: str = ""

    @property
    def rel_error(self) -> float:
        return (self.simulated - self.published) / self.published

    @property
    def within(self) -> bool:
        return abs(self.rel_error) <= WITHIN


# ---- ShareGPT-like lengths ------------------------------------------------------------------------------


def _filtered(mu_p: float, mu_o: float, z_p: np.ndarray, z_o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.rint(np.exp(mu_p + SIGMA_PROMPT * z_p))
    o = np.rint(np.exp(mu_o + SIGMA_OUTPUT * z_o))
    keep = (p >= MIN_LEN) & (o >= MIN_LEN) & (p <= MAX_PROMPT) & (p + o <= MAX_TOTAL)
    return p[keep], o[keep]


def fit_sharegpt(n: int = 400_000) -> tuple[float, float]:
    """mu of the two lognormals such that the filtered means are MEAN_PROMPT and MEAN_OUTPUT."""
    rng = np.random.default_rng(12345)
    z_p, z_o = rng.standard_normal(n), rng.standard_normal(n)
    mu_p, mu_o = np.log(MEAN_PROMPT), np.log(MEAN_OUTPUT)
    for _ in range(40):
        p, o = _filtered(mu_p, mu_o, z_p, z_o)
        mu_p += np.log(MEAN_PROMPT / p.mean())
        mu_o += np.log(MEAN_OUTPUT / o.mean())
    return float(mu_p), float(mu_o)


def sharegpt_sampler(mu_p: float, mu_o: float, seed: int) -> RequestSampler:
    gen = np.random.default_rng(seed)

    def sample(_rng: random.Random) -> RequestSpec:
        while True:
            p = int(np.rint(np.exp(mu_p + SIGMA_PROMPT * gen.standard_normal())))
            o = int(np.rint(np.exp(mu_o + SIGMA_OUTPUT * gen.standard_normal())))
            if p >= MIN_LEN and o >= MIN_LEN and p <= MAX_PROMPT and p + o <= MAX_TOTAL:
                return RequestSpec(p, o)

    return sample


# ---- table A ----------------------------------------------------------------------------------------------

TABLE_A = {  # rps: (SGLang TTFT, SGLang TPOT, vLLM TTFT, vLLM TPOT), medians in ms
    4: (31.98, 13.17, 100.48, 14.14),
    8: (35.68, 17.85, 120.39, 17.09),
}
OFFLINE = {"SGLang": 4281.51, "vLLM": 4132.37}


def a100_config() -> SimConfig:
    return SimConfig.from_catalog("Llama-3.1-8B", "A100-80G", "bf16", engine=EngineConfig(max_model_len=4096))


def online_medians(
    cfg: SimConfig, rps: float, duration: float, sampler_for: Callable[[int], RequestSampler], seeds: int
) -> tuple[list[float], list[float]]:
    ttft, tpot = [], []
    for seed in range(seeds):
        res = simulate_open_loop(
            cfg, rps, duration, sampler=sampler_for(seed), warmup_s=WARMUP_S, seed=seed, arrival="poisson"
        )
        start = round(WARMUP_S * NS)
        s = summarize_level(
            res.records, level_index=0, level=rps, mode="open", window=Window(start, start + round(duration * NS))
        )
        assert s.ttft_p50_ms is not None and s.tpot_p50_ms is not None
        ttft.append(s.ttft_p50_ms)
        tpot.append(s.tpot_p50_ms)
    return ttft, tpot


def _spread(values: list[float]) -> str:
    return f"seeds {min(values):.2f}..{max(values):.2f}" if len(values) > 1 else ""


def table_a(duration: float, seeds: int, sampler_for: Callable[[int], RequestSampler], tag: str) -> list[Point]:
    cfg = a100_config()
    points: list[Point] = []
    for rps, (sg_ttft, sg_tpot, vl_ttft, vl_tpot) in TABLE_A.items():
        ttft, tpot = online_medians(cfg, rps, duration, sampler_for, seeds)
        t, p = statistics.fmean(ttft), statistics.fmean(tpot)
        points += [
            Point(tag, f"{rps} RPS median TTFT vs SGLang", sg_ttft, t, "ms", ("ttft", "SGLang"), _spread(ttft)),
            Point(tag, f"{rps} RPS median TTFT vs vLLM", vl_ttft, t, "ms", ("ttft", "vLLM"), _spread(ttft)),
            Point(tag, f"{rps} RPS median TPOT vs SGLang", sg_tpot, p, "ms", ("tpot", "SGLang"), _spread(tpot)),
            Point(tag, f"{rps} RPS median TPOT vs vLLM", vl_tpot, p, "ms", ("tpot", "vLLM"), _spread(tpot)),
        ]
    # Offline: every prompt queued at once = far more users than max_num_seqs.
    run = simulate_ladder(
        cfg,
        [512],
        sampler_for=sampler_for,
        timing_for=lambda c: LevelTiming(ramp_up_s=5.0, warmup_s=30.0, measure_s=120.0),
    )
    tok_s = run.summaries[0].output_tok_s
    for engine, pub in OFFLINE.items():
        points.append(Point(tag, f"offline output tok/s vs {engine}", pub, tok_s, "tok/s", ("offline", "")))
    return points


# ---- table C ----------------------------------------------------------------------------------------------

TABLE_C = {  # (input, output): (H100 tok/s, H200 tok/s)
    (128, 128): (28312.0, 27911.0),
    (1000, 1000): (15220.0, 17744.0),
    (2048, 128): (3450.0, 3538.0),
    (5000, 500): (3459.0, 3902.0),
}


def table_c(measure_s: float) -> list[Point]:
    points: list[Point] = []
    for (isl, osl), published in TABLE_C.items():
        for gpu, pub in zip(("H100-SXM", "H200"), published, strict=True):
            prep = prepare(Profile("Llama-3.1-8B", gpu, "fp8", 1, "fp8", LengthDist.fixed(isl), LengthDist.fixed(osl)))
            sim = simulate_profile(prep, levels=[256, 512], extend=False, measure_s=measure_s)
            tok_s, at = peak(sim)
            pre = sum(sim.run.preemptions)
            label = f"{gpu} {isl}/{osl} (peak at {at:g} users{f', {pre} preemptions in both levels' if pre else ''})"
            points.append(Point("C", label, pub, tok_s, "tok/s", ("saturation", "")))
    return points


# ---- output -----------------------------------------------------------------------------------------------


def print_points(title: str, points: list[Point]) -> None:
    print(title)
    print(f"  {'point':<56} {'published':>10} {'simulated':>10} {'error':>8}  within 15 %")
    for p in points:
        mark = "yes" if p.within else "NO"
        extra = f"  ({p.spread})" if p.spread else ""
        print(f"  {p.label:<56} {p.published:>10.2f} {p.simulated:>10.2f} {p.rel_error:>+8.1%}  {mark}{extra}")
    misses = [p for p in points if not p.within]
    print(f"  -> {len(points) - len(misses)} of {len(points)} within {WITHIN:.0%}")
    for p in misses:
        direction = "high" if p.rel_error > 0 else "low"
        print(f"     MISS {p.label}: {p.rel_error:+.1%} ({direction}) - likely: {REASONS[p.reason_key]}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per online point (table A)")
    parser.add_argument("--duration", type=float, default=300.0, help="measured simulated seconds, table A")
    parser.add_argument("--saturation-duration", type=float, default=60.0, help="measured simulated s, table C")
    args = parser.parse_args()

    t0 = time.perf_counter()
    mu_p, mu_o = fit_sharegpt()
    p, o = _filtered(mu_p, mu_o, *np.random.default_rng(1).standard_normal((2, 400_000)))
    print(
        f"ShareGPT-like lengths: prompt lognormal(mu {mu_p:.3f}, sigma {SIGMA_PROMPT}) -> mean {p.mean():.0f}, "
        f"median {np.median(p):.0f}, P90 {np.percentile(p, 90):.0f}; output lognormal(mu {mu_o:.3f}, sigma "
        f"{SIGMA_OUTPUT}) -> mean {o.mean():.0f}, median {np.median(o):.0f}, P90 {np.percentile(o, 90):.0f} "
        f"(after the ShareGPT filter: >= {MIN_LEN}, prompt <= {MAX_PROMPT}, total <= {MAX_TOTAL})"
    )
    print(f"Table A: {args.duration:g} simulated s per point after {WARMUP_S:g} s warm-up, {args.seeds} seed(s)\n")
    a = table_a(args.duration, args.seeds, lambda seed: sharegpt_sampler(mu_p, mu_o, 1000 + seed), "A")
    print_points("Table A (SGLang README; Llama-3.1-8B BF16, 1 x A100-80G, ShareGPT-like, Poisson)", a)
    a_fixed = table_a(args.duration, 1, lambda seed: fixed_lengths(MEAN_PROMPT, MEAN_OUTPUT), "A-fixed")
    print_points(f"Table A sensitivity: every request {MEAN_PROMPT}/{MEAN_OUTPUT} tokens (one seed)", a_fixed)
    c = table_c(args.saturation_duration)
    print_points("Table C (TRT-LLM perf overview; Llama-3.1-8B FP8 weights + FP8 KV, saturation)", c)
    main_points = a + c
    within = sum(p.within for p in main_points)
    mean_abs = statistics.fmean(abs(p.rel_error) for p in main_points)
    print(f"tables A and C: {within} of {len(main_points)} points within {WITHIN:.0%}; mean |error| {mean_abs:.1%}")
    # vLLM 0.6.0's multi-step scheduling is a mechanism the engine does not model (see its MISS line).
    rest = [p for p in main_points if p.reason_key != ("ttft", "vLLM")]
    print(
        f"without the vLLM multi-step TTFT points: {sum(p.within for p in rest)} of {len(rest)} within "
        f"{WITHIN:.0%}; mean |error| {statistics.fmean(abs(p.rel_error) for p in rest):.1%}"
    )
    print(f"wall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
