"""Step-time roofline and memory arithmetic: hand-computed cases, monotonic properties, fit errors."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_knee.catalog import get_dtype, get_gpu, get_model
from llm_knee.catalog.hardware import GIB
from llm_knee.plan.roofline import (
    DEFAULT_EFFICIENCIES,
    DoesNotFitError,
    Efficiencies,
    StepTimeModel,
)

IDEAL = Efficiencies(
    bandwidth=1.0, compute_prefill=1.0, compute_decode=1.0, step_overhead_s=0.0, per_layer_overhead_s=0.0
)
H100_BW = 3.35e12
H100_BF16 = 989e12


def llama8b(dtype: str = "bf16", gpu: str = "h100", eff: Efficiencies = IDEAL, **kw: object) -> StepTimeModel:
    return StepTimeModel(get_model("Llama-3.1-8B"), get_gpu(gpu), get_dtype(dtype), eff=eff, **kw)  # type: ignore[arg-type]


def test_weights_bytes_per_dtype() -> None:
    params = 8_030_261_248
    assert llama8b("bf16").weights_bytes == params * 2
    assert llama8b("fp8").weights_bytes == params * 1
    assert llama8b("int4").weights_bytes == pytest.approx(params * 4.125 / 8)
    assert llama8b("q4_k_m").weights_bytes == pytest.approx(params * 4.89 / 8)


def test_kv_bytes_per_token_follows_the_kv_dtype() -> None:
    assert llama8b("bf16").kv_bytes_per_token == 131072
    # FP8 weights keep a 16-bit KV cache unless told otherwise (vLLM's kv_cache_dtype=auto).
    assert llama8b("fp8").kv_bytes_per_token == 131072
    assert llama8b("fp8", kv_dtype=get_dtype("fp8")).kv_bytes_per_token == 65536
    llama2 = StepTimeModel(get_model("Llama-2-7B"), get_gpu("h100"), get_dtype("bf16"))
    assert llama2.kv_bytes_per_token == 524288


def test_decode_step_is_weights_plus_kv_over_bandwidth() -> None:
    m = llama8b()
    # Every weight is read except the input embedding table (a row lookup): 8,030,261,248 - 128256*4096.
    read_bytes = (8_030_261_248 - 128256 * 4096) * 2
    kv_bytes = (1000 + 1) * 131072  # read the context, write the new token
    expected = read_bytes / H100_BW + kv_bytes / H100_BW
    assert m.step_time_s(0, 0.0, 1, 1000) == pytest.approx(expected, rel=1e-12)
    assert m.breakdown(0, 0.0, 1, 1000).bound == "memory"


def test_large_prefill_is_compute_bound_with_attention_flops() -> None:
    m = llama8b()
    tokens = 4096
    pairs = tokens * (0 + tokens / 2)
    layer_matmul = 32 * (4 * 4096 * 4096 - 2 * 4096 * 3072 + 3 * 4096 * 14336)  # q,o 4096^2; k,v 4096x1024
    assert layer_matmul == 32 * (41_943_040 + 176_160_768)
    linear = 2 * layer_matmul * tokens / H100_BF16
    attention = 4 * 32 * 32 * 128 * pairs / H100_BF16
    b = m.breakdown(tokens, pairs, 0, 0)
    assert b.bound == "compute"
    assert b.linear_compute_s == pytest.approx(linear, rel=1e-12)
    assert b.attention_compute_s == pytest.approx(attention, rel=1e-12)
    assert b.total_s == pytest.approx(linear + attention, rel=1e-12)


def test_fp8_uses_the_fp8_peak_where_the_card_has_one() -> None:
    on_h100 = llama8b("fp8", "h100").breakdown(4096, 0.0, 0, 0).linear_compute_s
    bf16_h100 = llama8b("bf16", "h100").breakdown(4096, 0.0, 0, 0).linear_compute_s
    assert on_h100 == pytest.approx(bf16_h100 * 989 / 1979)
    # A100 has no FP8 tensor cores: weight-only FP8 computes at the BF16 peak.
    on_a100 = llama8b("fp8", "a100-80g").breakdown(4096, 0.0, 0, 0).linear_compute_s
    assert on_a100 == pytest.approx(llama8b("bf16", "a100-80g").breakdown(4096, 0.0, 0, 0).linear_compute_s)


def test_overheads_are_added_per_step_and_per_layer() -> None:
    eff = dataclasses.replace(IDEAL, step_overhead_s=1e-3, per_layer_overhead_s=2e-5)
    assert llama8b(eff=eff).step_time_s(0, 0.0, 1, 10) - llama8b().step_time_s(0, 0.0, 1, 10) == pytest.approx(
        1e-3 + 32 * 2e-5
    )


def test_empty_step_takes_no_time_and_negative_inputs_are_rejected() -> None:
    assert llama8b().step_time_s(0, 0.0, 0, 0) == 0.0
    with pytest.raises(ValueError, match="n_decode"):
        llama8b().step_time_s(0, 0.0, -1, 0)


def test_mixtral_reads_only_the_experts_its_tokens_route_to() -> None:
    mixtral = get_model("Mixtral-8x7B")
    m = StepTimeModel(mixtral, get_gpu("h200"), get_dtype("bf16"), eff=IDEAL)
    assert m.expected_experts_touched(1) == pytest.approx(2.0)
    assert m.expected_experts_touched(2) == pytest.approx(8 * (1 - 0.75**2))
    assert m.expected_experts_touched(256) == pytest.approx(8.0)
    bw = 4.8e12
    expert_bytes = 32 * 3 * 4096 * 14336 * 2
    dense_bytes = (mixtral.total_params - 32000 * 4096) * 2 - 8 * expert_bytes
    one = m.breakdown(0, 0.0, 1, 100).weights_read_s
    assert one == pytest.approx((dense_bytes + 2 * expert_bytes) / bw)
    many = m.breakdown(0, 0.0, 256, 25600).weights_read_s
    assert many == pytest.approx((dense_bytes + 8 * expert_bytes) / bw)
    # Active, not total, parameters set the FLOPs per token.
    flops_per_token = m.breakdown(4096, 0.0, 0, 0).linear_compute_s * 989e12 / 4096
    assert flops_per_token == pytest.approx(2 * (mixtral.active_params - 2 * 32000 * 4096 - 4096 * 65))


def test_tensor_parallel_splits_weights_and_kv_and_pays_all_reduce() -> None:
    model, gpu, bf16 = get_model("Llama-3.1-70B"), get_gpu("h100"), get_dtype("bf16")
    tp2 = StepTimeModel(model, gpu, bf16, tp=2, eff=IDEAL)
    tp4 = StepTimeModel(model, gpu, bf16, tp=4, eff=IDEAL)
    assert tp2.weights_bytes == tp4.weights_bytes == model.total_params * 2
    assert tp4.weights_bytes_per_gpu == tp2.weights_bytes_per_gpu / 2
    b2, b4 = tp2.breakdown(0, 0.0, 8, 8000), tp4.breakdown(0, 0.0, 8, 8000)
    assert b4.weights_read_s == pytest.approx(b2.weights_read_s / 2)
    # 160 all-reduces of 8 x 8192 x 2 bytes, ring factor 2(tp-1)/tp, at 0.7 of 450 GB/s, plus 10 us each.
    expected_ar = 160 * (2 * 1 / 2 * 8 * 8192 * 2 / (450e9 * 0.7) + 10e-6)
    assert b2.allreduce_s == pytest.approx(expected_ar)
    assert tp4.kv_capacity_tokens() > 2 * tp2.kv_capacity_tokens()


def test_kv_heads_are_replicated_beyond_their_count() -> None:
    # Llama-3.1-70B has 8 KV heads: at tp=8 each GPU holds one head per layer.
    m = StepTimeModel(get_model("Llama-3.1-70B"), get_gpu("h100"), get_dtype("bf16"), tp=8)
    assert m.kv_bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 2


def test_kv_capacity_is_memory_minus_weights_minus_reserve() -> None:
    m = llama8b()
    reserve = 1 * GIB + 8192 * (3 * 14336 + 4 * 4096) * 2 + 256 * 128256 * 4
    assert m.runtime_reserve_bytes() == reserve
    free = 80 * GIB * 0.9 - 8_030_261_248 * 2 - reserve
    assert m.kv_capacity_tokens(0.9) == int(free // 131072)


def test_model_that_does_not_fit_reports_shortfall_and_options() -> None:
    m = StepTimeModel(get_model("Llama-3.1-70B"), get_gpu("h100"), get_dtype("bf16"))
    with pytest.raises(DoesNotFitError) as info:
        m.kv_capacity_tokens(0.9)
    err = info.value
    expected_short = (70_553_706_496 * 2 + m.runtime_reserve_bytes() + 327680 - 80 * GIB * 0.9) / GIB
    assert err.shortfall_gib == pytest.approx(expected_short)
    assert err.fitting_dtype == "fp8"
    assert err.fitting_tp == 2
    assert any("fp8" in s for s in err.suggestions)
    assert any("--tp 2" in s for s in err.suggestions)
    assert f"{expected_short:.2f} GiB" in str(err)


def test_when_no_dtype_fits_the_smallest_fitting_tp_is_offered() -> None:
    m = StepTimeModel(get_model("Llama-3.1-70B"), get_gpu("rtx-4090"), get_dtype("bf16"))
    assert not m.fits()
    with pytest.raises(DoesNotFitError) as info:
        m.kv_capacity_tokens()
    assert info.value.fitting_dtype is None
    assert info.value.fitting_tp == 8


def test_invalid_tp_and_efficiencies_are_rejected() -> None:
    with pytest.raises(ValueError, match="valid"):
        StepTimeModel(get_model("Qwen2.5-7B"), get_gpu("h100"), get_dtype("bf16"), tp=8)  # 28 heads
    with pytest.raises(ValueError, match="bandwidth"):
        Efficiencies(bandwidth=1.5, compute_prefill=0.5, compute_decode=0.5, step_overhead_s=0, per_layer_overhead_s=0)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        llama8b().kv_capacity_tokens(0.0)


def test_lengths_beyond_the_model_context_are_rejected() -> None:
    m = StepTimeModel(get_model("Llama-2-7B"), get_gpu("h100"), get_dtype("bf16"))
    m.check_lengths(2048, 2048)
    with pytest.raises(ValueError, match="4096"):
        m.check_lengths(4000, 200)
    with pytest.raises(ValueError, match="> 0"):
        m.check_lengths(0, 10)


# ---- monotonic properties -------------------------------------------------------------------------------

MODELS = ["Llama-3.1-8B", "Llama-2-7B", "Mixtral-8x7B", "Qwen2.5-7B"]
step_inputs = st.tuples(st.integers(0, 8192), st.floats(0, 5e7), st.integers(0, 512), st.integers(0, 2_000_000)).filter(
    lambda t: t[0] + t[2] > 0
)


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    step=step_inputs,
    bw=st.floats(100e9, 10e12),
    factor=st.floats(1.0, 10.0),
)
def test_more_bandwidth_never_slows_a_step(
    model: str, step: tuple[int, float, int, int], bw: float, factor: float
) -> None:
    gpu = get_gpu("h100")
    slow = StepTimeModel(get_model(model), dataclasses.replace(gpu, bandwidth_bytes_s=bw), get_dtype("bf16"))
    fast = StepTimeModel(get_model(model), dataclasses.replace(gpu, bandwidth_bytes_s=bw * factor), get_dtype("bf16"))
    assert fast.step_time_s(*step) <= slow.step_time_s(*step)


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    step=step_inputs,
    extra=st.integers(1, 256),
    ctx=st.integers(1, 32768),
)
def test_more_decode_tokens_never_speed_a_step(
    model: str, step: tuple[int, float, int, int], extra: int, ctx: int
) -> None:
    m = StepTimeModel(get_model(model), get_gpu("a100-80g"), get_dtype("bf16"), eff=DEFAULT_EFFICIENCIES)
    n_prefill, pairs, n_decode, kv = step
    assert m.step_time_s(n_prefill, pairs, n_decode + extra, kv + extra * ctx) >= m.step_time_s(*step)


@settings(max_examples=100, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    mem_gib=st.integers(8, 200),
    more=st.integers(1, 100),
    util=st.floats(0.5, 0.95),
)
def test_more_memory_never_lowers_kv_capacity(model: str, mem_gib: int, more: int, util: float) -> None:
    gpu = get_gpu("h200")
    small = StepTimeModel(get_model(model), dataclasses.replace(gpu, memory_bytes=mem_gib * GIB), get_dtype("fp8"))
    big = StepTimeModel(
        get_model(model), dataclasses.replace(gpu, memory_bytes=(mem_gib + more) * GIB), get_dtype("fp8")
    )
    if small.fits(util):
        assert big.kv_capacity_tokens(util) >= small.kv_capacity_tokens(util)
    else:
        with pytest.raises(DoesNotFitError):
            small.kv_capacity_tokens(util)


def test_step_time_agrees_with_its_breakdown() -> None:
    m = StepTimeModel(get_model("Mixtral-8x7B"), get_gpu("h100"), get_dtype("fp8"), tp=2)
    for args in [(512, 512 * 300.0, 64, 64 * 900), (0, 0.0, 1, 10), (8192, 8192 * 4096.0, 0, 0)]:
        assert m.step_time_s(*args) == m.breakdown(*args).total_s
