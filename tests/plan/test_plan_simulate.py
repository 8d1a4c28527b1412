"""`--simulate`: the ladder through the engine simulator, judged like a measured run, beside the prediction."""

from __future__ import annotations

import pytest

from llm_knee.catalog import get_dtype, get_gpu, get_model
from llm_knee.plan.inputs import Lengths, parse_plan_slo
from llm_knee.plan.planner import PlanRequest, make_plan
from llm_knee.plan.simulate import objectives, sim_levels, simulate_plan


def test_levels_reach_past_the_predicted_knee_within_twice_the_memory_limit() -> None:
    assert sim_levels(88, 586) == [1, 2, 4, 8, 16, 32, 64, 88, 128, 256, 352]
    assert sim_levels(0, 50) == [1, 2, 4, 8]
    assert sim_levels(40, 45) == [1, 2, 4, 8, 16, 32, 40, 64, 90]


def test_plan_targets_become_analysis_objectives() -> None:
    objs = objectives(parse_plan_slo("ttft_p99=400ms,tok_s_per_user=25"))
    assert [str(o) for o in objs] == ["tpot_p50=40ms", "ttft_p99=400ms"]


def test_steady_state_prediction_matches_the_simulator_below_the_knee() -> None:
    """The planner's steady-state TPOT and QPS agree with the discrete-event engine fed the same step model."""
    plan = make_plan(
        PlanRequest(get_model("llama-3.1-8b"), get_gpu("h100"), get_dtype("bf16"), Lengths.parse("512", "256"))
    )
    sim = simulate_plan(plan, seed=1)
    predicted = {r.concurrency: r for r in plan.speed.ladder}
    compared = 0
    for summary in sim.summaries:
        row = predicted.get(int(summary.level))
        if row is None or summary.tpot_p50_ms is None:
            continue
        assert summary.tpot_p50_ms == pytest.approx(row.tpot_s * 1e3, rel=0.03), summary.level
        assert summary.req_s == pytest.approx(row.qps, rel=0.05), summary.level
        compared += 1
    assert compared >= 6
    assert sim.knee is not None
    assert sim.knee <= max(sim.levels)
    assert all(p == 0 for p in sim.preemptions)  # the ladder stays within the KV capacity here
