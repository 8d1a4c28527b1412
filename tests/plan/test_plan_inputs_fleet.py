"""Planner inputs (lengths, SLOs, efficiency) and fleet sizing: Little's law, GPUs for a target, headroom,
cost, and the replicas-vs-tensor-parallel table."""

from __future__ import annotations

import math

import pytest

from llm_knee.catalog import get_dtype, get_gpu, get_model
from llm_knee.plan.fleet import plan_fleet
from llm_knee.plan.inputs import Lengths, PlanInputError, fleet_efficiency, parse_plan_slo
from llm_knee.plan.planner import PlanRequest, make_plan


def test_lengths_use_the_mean_for_speed_and_an_upper_quantile_for_memory() -> None:
    fixed = Lengths.parse("512", "256")
    assert (fixed.input_mean, fixed.input_memory, fixed.request_tokens_memory) == (512.0, 512, 768)
    mixed = Lengths.parse("normal:512,64", "uniform:128,384")
    assert mixed.input_mean == pytest.approx(512.0, abs=1e-9)
    assert mixed.input_memory == math.ceil(512 + 2.3263478740408408 * 64) == 661  # P99
    assert mixed.output_mean == 256.0 and mixed.output_memory == 384  # uniform: its maximum
    assert "P99" in mixed.describe() and "P100" in mixed.describe()


@pytest.mark.parametrize("bad", ["normal:-5,3", "uniform:-5,3", "-7", "normal:512,-1", "uniform:700,300"])
def test_negative_or_reversed_lengths_are_rejected(bad: str) -> None:
    with pytest.raises(PlanInputError, match="bad length"):
        Lengths.parse(bad, "256")


def test_slo_terms() -> None:
    slo = parse_plan_slo("ttft=500ms,tok_s_per_user=30")
    assert (slo.ttft_s, slo.tok_s_per_user, slo.strict_p99) == (0.5, 30.0, False)
    assert parse_plan_slo("tpot_p50=40ms").tok_s_per_user == pytest.approx(25.0)
    assert parse_plan_slo("tpot=40ms,tok_s_per_user=30").tok_s_per_user == 30.0  # the stricter wins
    assert parse_plan_slo("ttft_p99=1s").strict_p99 and parse_plan_slo("ttft_p99=1s").ttft_s == 1.0
    assert parse_plan_slo("e2e=20s").e2e_s == 20.0
    assert parse_plan_slo(None).tok_s_per_user == 30.0  # domain.md §4 default
    for bad in ("ttft=fast", "speed=3", "ttft_p100=5ms", ","):
        with pytest.raises(PlanInputError):
            parse_plan_slo(bad)


def test_efficiency_defaults_and_bounds() -> None:
    assert fleet_efficiency(None, parse_plan_slo(None))[0] == 0.6
    assert fleet_efficiency(None, parse_plan_slo("ttft_p99=500ms"))[0] == 0.45
    assert fleet_efficiency(0.8, parse_plan_slo("ttft_p99=500ms"))[0] == 0.8
    for bad in (0.0, -0.1, 1.01, float("nan")):
        with pytest.raises(PlanInputError, match=r"\(0, 1\]"):
            fleet_efficiency(bad, parse_plan_slo(None))


def test_fleet_by_hand() -> None:
    f = plan_fleet(
        knee=88, e2e_s_at_knee=4.0, gpus_per_replica=2, output_tokens_per_request=256.0, efficiency=0.6,
        efficiency_source="test", target_qps=100.0, gpus_available=8, price_per_gpu_hour=3.0,
    )  # fmt: skip
    assert f.replica_qps == 22.0  # Little's law: 88 / 4
    assert f.replicas_needed == math.ceil(100 / (22 * 0.6)) == 8
    assert f.gpus_needed == 16
    assert f.gpus_needed_with_headroom == math.ceil(100 * 1.25 / (22 * 0.6)) * 2 == 20
    assert f.replicas_available == 4 and f.qps_available == pytest.approx(4 * 22 * 0.6)
    assert f.usd_per_hour == 20 * 3.0
    assert f.usd_per_mtok_at_knee == pytest.approx(2 * 3.0 / (22 * 256 * 3600) * 1e6)
    assert f.fleet_usd_per_mtok == pytest.approx(20 * 3.0 / (100 * 256 * 3600) * 1e6)


def test_fleet_without_a_knee_says_so_instead_of_a_number() -> None:
    f = plan_fleet(
        knee=0, e2e_s_at_knee=None, gpus_per_replica=1, output_tokens_per_request=256.0, efficiency=0.6,
        efficiency_source="test", target_qps=5.0,
    )  # fmt: skip
    assert f.gpus_needed is None and "no concurrency meets" in f.note


def test_gpus_must_be_whole_replicas() -> None:
    with pytest.raises(ValueError, match="multiple"):
        plan_fleet(
            knee=4, e2e_s_at_knee=1.0, gpus_per_replica=4, output_tokens_per_request=1.0, efficiency=0.6,
            efficiency_source="", gpus_available=6,
        )  # fmt: skip


def _request(**kw: object) -> PlanRequest:
    base: dict[str, object] = {
        "model": get_model("llama-3.1-8b"),
        "gpu": get_gpu("h100"),
        "dtype": get_dtype("bf16"),
        "lengths": Lengths.parse("512", "256"),
    }
    base.update(kw)
    return PlanRequest(**base)  # type: ignore[arg-type]


def test_plan_fleet_uses_the_predicted_knee_and_its_e2e() -> None:
    plan = make_plan(_request(target_qps=20.0))
    k = plan.speed.at_knee
    assert k is not None
    assert plan.fleet.replica_qps == pytest.approx(plan.predicted_knee / k.e2e_s, rel=1e-15)
    assert plan.fleet.gpus_needed == math.ceil(20 / (plan.fleet.replica_qps * 0.6))
    slo_plan = make_plan(_request(target_qps=20.0, slo=parse_plan_slo("ttft_p99=500ms")))
    assert slo_plan.fleet.efficiency == 0.45


def test_tensor_parallel_trade_off_lists_every_fitting_degree() -> None:
    plan = make_plan(_request(model=get_model("llama-3.1-70b"), tp=4, target_qps=10.0))
    options = {o.tp: o for o in plan.tp_options}
    assert set(options) == {2, 4, 8}  # tp 1 does not fit 141 GB of weights
    assert options[4].predicted_knee == plan.predicted_knee
    assert options[8].tok_s_per_user_at_knee is not None and options[4].tok_s_per_user_at_knee is not None
    assert options[8].tok_s_per_user_at_knee > options[4].tok_s_per_user_at_knee  # more GPUs stream the weights
    for o in options.values():
        assert o.qps_per_gpu == pytest.approx(o.replica_qps / o.tp)


def test_single_gpu_plan_has_no_tp_table_and_warns_about_vllm_max_num_seqs() -> None:
    # L40S: little bandwidth for its FLOPs, so decode stays bandwidth-bound past 256 users.
    plan = make_plan(
        _request(gpu=get_gpu("l40s"), slo=parse_plan_slo("tok_s_per_user=1"), lengths=Lengths.parse("32", "512"))
    )
    assert plan.tp_options == ()
    assert plan.predicted_knee > 256
    assert any(
        f"--max-num-seqs 256 sequences by default; raise it to >= {plan.predicted_knee}" in n for n in plan.notes
    )
    small = make_plan(_request())
    assert small.predicted_knee <= 256 and not any("max-num-seqs" in n for n in small.notes)


def test_context_beyond_the_model_is_rejected() -> None:
    with pytest.raises(ValueError, match="maximum context of 4096"):
        make_plan(_request(model=get_model("llama-2-7b"), lengths=Lengths.parse("4000", "200")))
    # Memory quantiles count: the P99 of the prompt is what must fit.
    with pytest.raises(ValueError, match="exceeds"):
        make_plan(_request(model=get_model("llama-2-7b"), lengths=Lengths.parse("normal:3500,400", "200")))
