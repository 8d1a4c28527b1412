"""`knee plan --simulate`: run the concurrency ladder through the engine simulator and judge its knee with
the same analysis as a measured run (summarize_level + recommend), to set beside the predicted knee.

The simulated engine uses the plan's own step-time model and KV capacity, with max_num_seqs raised to the
top of the ladder (so the engine's default of 256 does not hide the knee the planner predicts). Each level
ramps its users up over one predicted E2E, warms up for two and measures six (all in simulated time). Length
draws above the plan's memory quantiles are clipped to them, so the simulated mix fits the same memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from llm_knee.analysis.recommend import AnalysisSettings, Recommendation, recommend
from llm_knee.analysis.slo import Objective
from llm_knee.analysis.summary import LevelSummary
from llm_knee.plan.inputs import Lengths, PlanSlo
from llm_knee.plan.planner import CapacityPlan, step_model
from llm_knee.plan.speed import Curves
from llm_knee.sim.config import EngineConfig
from llm_knee.sim.ladder import LevelTiming, simulate_ladder
from llm_knee.sim.loop import RequestSampler
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import SimConfig

MAX_LEVEL = 4096
RAMP_E2E, WARMUP_E2E, MEASURE_E2E = 1.0, 2.0, 6.0


@dataclass(frozen=True)
class SimulatedKnee:
    levels: tuple[int, ...]
    summaries: tuple[LevelSummary, ...]
    preemptions: tuple[int, ...]
    recommendation: Recommendation
    objectives: tuple[Objective, ...]

    @property
    def knee(self) -> float | None:
        return self.recommendation.recommended

    def to_dict(self) -> dict[str, object]:
        return {
            "levels": list(self.levels),
            "objectives": [str(o) for o in self.objectives],
            "per_level": [
                {
                    "concurrency": s.level,
                    "output_tok_s": s.output_tok_s,
                    "req_s": s.req_s,
                    "ttft_p99_ms": s.ttft_p99_ms,
                    "tpot_p50_ms": s.tpot_p50_ms,
                    "decode_tok_s_per_user_p50": s.decode_tok_s_per_user_p50,
                    "slo_met": s.slo_met,
                    "preemptions": p,
                }
                for s, p in zip(self.summaries, self.preemptions, strict=True)
            ],
            "simulated_knee": self.knee,
            "recommendation": self.recommendation.to_dict(),
        }


def sim_levels(knee: int, memory_limit: int) -> list[int]:
    """Powers of two up to four times the predicted knee (at least 8; a short sweep would pull the knee methods
    towards the prediction), at most twice the memory limit, plus the knee itself."""
    top = min(max(4 * knee, 8), 2 * memory_limit, MAX_LEVEL)
    levels = {1}
    c = 1
    while c < top:
        c *= 2
        levels.add(min(c, top))
    if knee >= 1:
        levels.add(knee)
    return sorted(levels)


def objectives(slo: PlanSlo) -> tuple[Objective, ...]:
    """The plan's targets as analysis SLOs; terms without a percentile are judged at the median."""
    objs = [Objective("tpot", slo.tpot_percentile or 50.0, 1000.0 / slo.tok_s_per_user)]
    if slo.ttft_s is not None:
        objs.append(Objective("ttft", slo.ttft_percentile, slo.ttft_s * 1000.0))
    if slo.e2e_s is not None:
        objs.append(Objective("e2e", slo.e2e_percentile, slo.e2e_s * 1000.0))
    return tuple(objs)


def _sampler(lengths: Lengths, seed: int) -> RequestSampler:
    gen = np.random.default_rng(seed)
    cap_in, cap_out = lengths.input_memory, lengths.output_memory

    def sample(_rng: random.Random) -> RequestSpec:
        return RequestSpec(min(lengths.input.sample(gen), cap_in), min(lengths.output.sample(gen), cap_out))

    return sample


def simulate_plan(plan: CapacityPlan, *, seed: int = 0) -> SimulatedKnee:
    req = plan.request
    stm = step_model(req)
    mem_limit = plan.memory.max_concurrency_memory
    levels = sim_levels(plan.predicted_knee, mem_limit)
    engine = EngineConfig(
        max_num_seqs=max(256, levels[-1]),
        max_num_batched_tokens=max(plan.memory.max_num_batched_tokens, levels[-1]),
        gpu_memory_utilization=min(1.0, plan.memory.usable_fraction),
    )
    cfg = SimConfig(stm, req.model.max_context, engine, kv_capacity_tokens=plan.memory.kv_capacity_tokens)
    curves = Curves(stm, req.lengths)
    objs = objectives(req.slo)

    def timing(c: int) -> LevelTiming:
        # Past the memory limit requests queue: a cycle lasts about c / limit times longer.
        e2e = curves.e2e(min(c, mem_limit)) * max(1.0, c / mem_limit)
        return LevelTiming(RAMP_E2E * e2e, (RAMP_E2E + WARMUP_E2E) * e2e, MEASURE_E2E * e2e)

    run = simulate_ladder(
        cfg, levels, sampler_for=lambda i: _sampler(req.lengths, seed + i), timing_for=timing, seed=seed, slo=objs
    )
    summaries, preemptions = run.summaries, run.preemptions
    settings = AnalysisSettings(
        min_user_tok_s=req.slo.tok_s_per_user,
        ttft_target_ms=500.0 if req.slo.ttft_s is None else req.slo.ttft_s * 1000.0,
    )
    rec = recommend(summaries, settings)
    return SimulatedKnee(tuple(levels), tuple(summaries), tuple(preemptions), rec, objs)
