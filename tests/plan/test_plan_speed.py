"""Speed side of `knee plan`: steady-state steps by hand, MoE active reads, FP8 vs BF16 peaks, the knee rule,
and monotonic properties (which the knee's bisection relies on)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_knee.catalog import get_dtype, get_gpu, get_model
from llm_knee.plan.inputs import Lengths, PlanSlo, parse_plan_slo
from llm_knee.plan.roofline import Efficiencies, StepTimeModel
from llm_knee.plan.speed import Curves, ladder_levels, last_true, plan_speed

IDEAL = Efficiencies(
    bandwidth=1.0, compute_prefill=1.0, compute_decode=1.0, step_overhead_s=0.0, per_layer_overhead_s=0.0
)
# Llama-3.1-8B by hand: per layer q,o 4096x4096, k,v 4096x1024, MLP 3 x 4096 x 14336.
L8_LAYER_MATMUL = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
L8_HEAD = 128256 * 4096
L8_READ = L8_LAYER_MATMUL + L8_HEAD + 4096 * 65  # every weight but the input embedding (norms: 65 x hidden)
H100_BW, H100_BF16, H100_FP8 = 3.35e12, 989e12, 1979e12


def model(
    name: str = "llama-3.1-8b", gpu: str = "h100", dtype: str = "bf16", eff: Efficiencies = IDEAL
) -> StepTimeModel:
    return StepTimeModel(get_model(name), get_gpu(gpu), get_dtype(dtype), eff=eff)


def test_one_user_cycle_by_hand() -> None:
    """c = 1, 512 -> 256: one prefill step, then 255 decode steps each reading the weights and 641 KV tokens."""
    plan = plan_speed(model(), Lengths.parse("512", "256"), 100, PlanSlo())
    row = plan.ladder[0]
    assert row.concurrency == 1
    kv_tok = 2 * 32 * 8 * 128 * 2
    decode = L8_READ * 2 / H100_BW + (640 + 1) * kv_tok / H100_BW  # weights + (context + new token) KV
    prefill_linear = 512 * 2 * L8_LAYER_MATMUL / H100_BF16  # compute-bound: above the weight read time
    prefill_attn = 4 * 32 * 32 * 128 * (512 * 512 / 2) / H100_BF16  # above its 512-token KV write
    prefill = prefill_linear + prefill_attn
    assert row.ttft_s == pytest.approx(prefill, rel=1e-12)
    assert row.e2e_s == pytest.approx(prefill + 255 * decode, rel=1e-12)
    assert row.tpot_s == pytest.approx(decode, rel=1e-12)
    assert row.tok_s_per_user == pytest.approx(1 / decode, rel=1e-12)
    assert row.qps == pytest.approx(1 / (prefill + 255 * decode), rel=1e-12)
    assert plan.prefill_time_s == pytest.approx(prefill, rel=1e-12)


def test_prefills_of_other_users_slow_every_decode() -> None:
    """At c = O every step holds one prefill, so the steady step is much slower than a pure decode step."""
    curves = Curves(model(eff=Efficiencies(0.65, 0.55, 0.55, 1e-3, 10e-6)), Lengths.parse("512", "256"))
    row = curves.row(256)
    assert [(s.prefills, s.decoders, s.count) for s in row.steps] == [(1, 255, 256)]
    assert row.tpot_s > 1.5 * row.decode_step_s
    assert row.e2e_s == pytest.approx(256 * row.steps[0].total_s, rel=1e-12)


def test_cycle_composition_splits_prefills_evenly() -> None:
    curves = Curves(model(), Lengths.parse("512", "100"))
    kinds = curves.cycle(250)  # divmod(250, 100) = (2, 50)
    assert [(k.prefills, k.decoders, k.count) for k in kinds] == [(2, 248, 50), (3, 247, 50)]


def test_moe_decode_reads_the_active_experts_at_batch_one() -> None:
    mixtral = model("mixtral-8x7b", gpu="h200")
    row = plan_speed(mixtral, Lengths.parse("512", "256"), 10, PlanSlo()).ladder[0]
    active_read = 12_879_925_248 - 32000 * 4096  # active parameters minus the embedding lookup
    total_read = 46_702_792_704 - 32000 * 4096
    kv = (640 + 1) * 2 * 32 * 8 * 128 * 2
    assert row.decode_step_s == pytest.approx((active_read * 2 + kv) / 4.8e12, rel=1e-12)
    naive = (total_read * 2 + kv) / 4.8e12  # reading every expert: 3.6x too slow at batch 1
    assert naive / row.decode_step_s > 3.5
    # A big batch touches every expert: then all the weights are read per step.
    big = Curves(mixtral, Lengths.parse("512", "256")).decode_only(512)
    assert big.weights_read_s == pytest.approx(total_read * 2 / 4.8e12, rel=1e-9)


def _ridge_by_hand(weight_bytes: float, bandwidth: float, peak: float, i: int = 512, o: int = 256) -> int:
    """First c whose matmul FLOPs per cycle reach the weight reads per cycle (dense model, ideal roofline)."""
    lp = 2 * L8_LAYER_MATMUL / peak  # per prompt token
    ld = 2 * (L8_LAYER_MATMUL + L8_HEAD) / peak  # per decode token (plus the lm_head row)
    return math.ceil(o * weight_bytes / bandwidth / (i * lp + (o - 1) * ld))


def _compute_candidate(m: StepTimeModel) -> int | None:
    plan = plan_speed(m, Lengths.parse("512", "256"), 10_000, PlanSlo(tok_s_per_user=1.0))
    return next(c.concurrency for c in plan.candidates if c.name == "compute_bound")


def test_fp8_uses_the_fp8_peak_so_the_ridge_stays_put_on_h100() -> None:
    bf16 = _ridge_by_hand(L8_READ * 2, H100_BW, H100_BF16)
    fp8 = _ridge_by_hand(L8_READ * 1, H100_BW, H100_FP8)
    assert bf16 == 104 and fp8 == 104
    assert _compute_candidate(model()) == bf16
    assert _compute_candidate(model(dtype="fp8")) == fp8
    # Taking the BF16 peak for FP8 (a common spreadsheet slip) would halve the ridge.
    assert _ridge_by_hand(L8_READ * 1, H100_BW, H100_BF16) == 52


def test_fp8_weights_on_a100_run_at_the_16bit_peak() -> None:
    a100_bw, a100_bf16 = 2.039e12, 312e12
    bf16 = _ridge_by_hand(L8_READ * 2, a100_bw, a100_bf16)
    fp8 = _ridge_by_hand(L8_READ * 1, a100_bw, a100_bf16)
    assert _compute_candidate(model(gpu="a100-80g")) == bf16
    assert _compute_candidate(model(gpu="a100-80g", dtype="fp8")) == fp8
    assert fp8 == pytest.approx(bf16 / 2, abs=1)


def test_knee_is_the_smallest_candidate_and_names_it() -> None:
    lengths = Lengths.parse("512", "256")
    m = model(eff=Efficiencies(0.65, 0.55, 0.55, 1e-3, 10e-6))
    curves = Curves(m, lengths)
    plan = plan_speed(m, lengths, 586, parse_plan_slo("tok_s_per_user=30,ttft=25ms"))
    by_name = {c.name: c.concurrency for c in plan.candidates}
    assert by_name["memory"] == 586
    speed = by_name["tok_s_per_user"]
    assert speed is not None and 1 / curves.tpot(speed) >= 30 > 1 / curves.tpot(speed + 1)
    ttft = by_name["ttft"]
    assert ttft is not None and curves.ttft(ttft) <= 0.025 < curves.ttft(ttft + 1)
    assert plan.predicted_knee == min(v for v in by_name.values() if v is not None)
    assert plan.binding == tuple(k for k, v in by_name.items() if v == plan.predicted_knee)
    assert plan.at_knee is not None and plan.at_knee.concurrency == plan.predicted_knee


def test_memory_binds_when_nothing_else_does() -> None:
    plan = plan_speed(model(), Lengths.parse("512", "256"), 20, PlanSlo(tok_s_per_user=1.0))
    assert plan.predicted_knee == 20 and plan.binding == ("memory",)
    assert [r.concurrency for r in plan.ladder] == [1, 2, 4, 8, 16, 20]


def test_unreachable_speed_target_gives_no_knee() -> None:
    plan = plan_speed(model("llama-3.1-8b", gpu="orin", dtype="bf16"), Lengths.parse("512", "256"), 50, PlanSlo())
    assert plan.predicted_knee == 0 and plan.binding == ("tok_s_per_user",)
    assert plan.at_knee is None
    assert plan.ladder[0].tok_s_per_user < 30


def test_last_true_and_ladder_levels() -> None:
    assert last_true(lambda c: c <= 37, 100) == 37
    assert last_true(lambda c: True, 100) == 100
    assert last_true(lambda c: False, 100) == 0
    assert ladder_levels(10, (3, 50)) == [1, 2, 3, 4, 8, 10]


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["llama-3.1-8b", "llama-2-7b", "mixtral-8x7b", "qwen2.5-7b"]),
    dtype=st.sampled_from(["bf16", "fp8", "int4"]),
    inp=st.integers(min_value=1, max_value=8000),
    out=st.integers(min_value=1, max_value=2000),
    c=st.integers(min_value=1, max_value=600),
)
def test_per_user_speed_and_ttft_never_improve_with_more_users(
    name: str, dtype: str, inp: int, out: int, c: int
) -> None:
    curves = Curves(model(name, gpu="h200", dtype=dtype, eff=Efficiencies(0.65, 0.55, 0.55, 1e-3, 10e-6)),
                    Lengths.parse(str(inp), str(out)))  # fmt: skip
    assert curves.tpot(c + 1) >= curves.tpot(c) * (1 - 1e-12)
    assert curves.ttft(c + 1) >= curves.ttft(c) * (1 - 1e-12)
    assert curves.e2e(c + 1) >= curves.e2e(c) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    bw_a=st.floats(min_value=100e9, max_value=10e12),
    bw_b=st.floats(min_value=100e9, max_value=10e12),
    c=st.integers(min_value=1, max_value=512),
    name=st.sampled_from(["llama-3.1-8b", "mixtral-8x7b"]),
)
def test_more_bandwidth_never_lowers_tok_s(bw_a: float, bw_b: float, c: int, name: str) -> None:
    slow, fast = sorted((bw_a, bw_b))
    lengths = Lengths.parse("1024", "256")

    def speed(bw: float) -> float:
        gpu = dataclasses.replace(get_gpu("h200"), bandwidth_bytes_s=bw)
        m = StepTimeModel(get_model(name), gpu, get_dtype("bf16"))
        return 1.0 / Curves(m, lengths).tpot(c)

    assert speed(fast) >= speed(slow)
