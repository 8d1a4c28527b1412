"""Memory side of `knee plan`: hand-computed weights, KV and max concurrency for several architectures,
the cases where naive formulas go wrong, the 0.85 safety figure, and does-not-fit errors with options."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_knee.catalog import get_dtype, get_gpu, get_model
from llm_knee.catalog.hardware import GIB
from llm_knee.plan.memory import DEFAULT_OS_RESERVE_BYTES, plan_memory
from llm_knee.plan.roofline import DoesNotFitError, StepTimeModel

H100_BYTES = 80 * GIB
LLAMA8B_PARAMS = 8_030_261_248
# vLLM-style reserve for Llama-3.1-8B at 8192 batched tokens: 1 GiB + activations + fp32 logits of 256 rows.
LLAMA8B_RESERVE = GIB + 8192 * (3 * 14336 + 4 * 4096) * 2 + 256 * 128256 * 4


def stm(model: str, gpu: str = "h100", dtype: str = "bf16", tp: int = 1, kv: str | None = None) -> StepTimeModel:
    return StepTimeModel(
        get_model(model), get_gpu(gpu), get_dtype(dtype), tp=tp, kv_dtype=get_dtype(kv) if kv else None
    )


def test_llama_3_1_8b_on_h100_by_hand() -> None:
    m = plan_memory(stm("llama-3.1-8b"), 512 + 256)
    assert m.weights_bytes == LLAMA8B_PARAMS * 2
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    assert m.kv_bytes_per_request == 131072 * 768
    assert m.runtime_reserve_bytes == LLAMA8B_RESERVE
    free = H100_BYTES * 0.9 - LLAMA8B_PARAMS * 2 - LLAMA8B_RESERVE
    assert m.kv_free_bytes_per_gpu == pytest.approx(free, rel=1e-15)
    assert m.kv_capacity_tokens == math.floor(free / 131072) == 450_673
    assert m.max_concurrency_memory == 450_673 // 768 == 586
    safe_free = H100_BYTES * 0.85 - LLAMA8B_PARAMS * 2 - LLAMA8B_RESERVE
    assert m.max_concurrency_memory_safe == math.floor(safe_free / 131072) // 768 == 544
    assert m.fits


def test_ignoring_gqa_would_overstate_kv_four_times_for_llama_3_1_8b() -> None:
    m = plan_memory(stm("llama-3.1-8b"), 768)
    naive_per_token = 2 * 32 * 32 * 128 * 2  # attention heads instead of KV heads
    assert naive_per_token == 4 * m.kv_bytes_per_token
    naive_concurrency = math.floor(m.kv_free_bytes_per_gpu / naive_per_token) // 768
    assert naive_concurrency == 146
    assert m.max_concurrency_memory == 586  # four times as many users fit with GQA


def test_non_gqa_llama_2_7b_holds_a_full_kv_per_head() -> None:
    m = plan_memory(stm("llama-2-7b"), 1024)
    assert m.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524288
    reserve = GIB + 8192 * (3 * 11008 + 4 * 4096) * 2 + 256 * 32000 * 4
    free = H100_BYTES * 0.9 - 6_738_415_616 * 2 - reserve
    assert m.max_concurrency_memory == math.floor(free / 524288) // 1024


def test_moe_memory_holds_every_expert() -> None:
    m = plan_memory(stm("mixtral-8x7b", gpu="h200"), 768)
    assert m.weights_bytes == 46_702_792_704 * 2  # total, not the 12.9 B active parameters
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    # Activations of the reserve follow the 2 experts each token runs, not all 8.
    assert m.runtime_reserve_bytes == GIB + 8192 * (3 * 14336 * 2 + 4 * 4096) * 2 + 256 * 32000 * 4


def test_tensor_parallel_splits_weights_and_kv_heads_per_gpu() -> None:
    m = plan_memory(stm("llama-3.1-70b", tp=4), 768)
    assert m.weights_bytes_per_gpu == m.weights_bytes / 4
    assert m.kv_bytes_per_token_per_gpu == 2 * 80 * 2 * 128 * 2  # 8 KV heads / 4 GPUs
    # Past 8 GPUs the KV heads would be replicated: at tp 8 each GPU holds exactly one.
    assert plan_memory(stm("llama-3.1-70b", tp=8), 768).kv_bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 2


def test_safe_figure_never_exceeds_the_exact_one_and_follows_a_lower_utilization() -> None:
    m = plan_memory(stm("llama-3.1-8b"), 768, gpu_memory_utilization=0.8)
    assert m.safe_usable_fraction == 0.8  # min(0.8, 0.85)
    assert m.max_concurrency_memory_safe == m.max_concurrency_memory


def test_unified_memory_subtracts_the_os_reserve() -> None:
    model = stm("llama-3.1-8b", gpu="jetson-agx-orin-64gb", dtype="q4_k_m", kv="fp16")
    m = plan_memory(model, 768, gpu_memory_utilization=1.0, os_reserve_bytes=DEFAULT_OS_RESERVE_BYTES)
    assert m.usable_bytes_per_gpu == pytest.approx(64 * GIB - 6 * GIB, rel=1e-15)
    assert m.safe_usable_fraction == pytest.approx(0.85 * (58 / 64), rel=1e-15)


def test_model_that_does_not_fit_reports_shortfall_and_verified_options() -> None:
    with pytest.raises(DoesNotFitError) as info:
        plan_memory(stm("llama-3.1-70b"), 768)
    err = info.value
    weights = 70_553_706_496 * 2
    reserve = GIB + 8192 * (3 * 28672 + 4 * 8192) * 2 + 256 * 128256 * 4
    expected = (weights + reserve + 768 * 2 * 80 * 8 * 128 * 2 - 0.9 * H100_BYTES) / GIB
    assert err.shortfall_gib == pytest.approx(expected, rel=1e-12)
    assert err.fitting_dtype == "fp8" and err.fitting_tp == 2
    assert "short by 62.59 GiB" in str(err)
    # Each suggested option really fits.
    assert plan_memory(stm("llama-3.1-70b", dtype="fp8"), 768).fits
    assert plan_memory(stm("llama-3.1-70b", tp=2), 768).fits


def test_context_that_does_not_fit_offers_a_shorter_context() -> None:
    model = stm("llama-3.1-8b", gpu="rtx-4090")
    with pytest.raises(DoesNotFitError) as info:
        plan_memory(model, 101_000)
    longest = math.floor(model.kv_free_bytes_per_gpu(0.9) / 131072)
    assert f"prompt + output <= {longest} tokens" in " ".join(info.value.suggestions)
    assert plan_memory(model, longest).max_concurrency_memory == 1
    with pytest.raises(DoesNotFitError):
        plan_memory(model, longest + 1)


def test_edge_device_suggests_gguf_quantization() -> None:
    model = stm("llama-3.1-70b", gpu="orin", kv="fp16")
    with pytest.raises(DoesNotFitError) as info:
        plan_memory(model, 768, gpu_memory_utilization=1.0, os_reserve_bytes=DEFAULT_OS_RESERVE_BYTES)
    assert info.value.fitting_dtype == "q4_k_m"
    assert info.value.fitting_tp is None  # one device: no tensor parallel


@settings(max_examples=60, deadline=None)
@given(
    mem_a=st.integers(min_value=16, max_value=200),
    mem_b=st.integers(min_value=16, max_value=200),
    tokens=st.integers(min_value=64, max_value=16384),
    model=st.sampled_from(["llama-3.1-8b", "llama-2-7b", "qwen2.5-7b", "mixtral-8x7b"]),
)
def test_more_memory_never_lowers_max_concurrency(mem_a: int, mem_b: int, tokens: int, model: str) -> None:
    small, large = sorted((mem_a, mem_b))

    def concurrency(gib: int) -> int:
        gpu = dataclasses.replace(get_gpu("h100"), memory_bytes=gib * GIB)
        try:
            return plan_memory(StepTimeModel(get_model(model), gpu, get_dtype("bf16")), tokens).max_concurrency_memory
        except DoesNotFitError:
            return 0

    assert concurrency(small) <= concurrency(large)


@settings(max_examples=60, deadline=None)
@given(
    len_a=st.integers(min_value=2, max_value=32768),
    len_b=st.integers(min_value=2, max_value=32768),
    gpu=st.sampled_from(["h100", "a100-80g", "l40s", "rtx-4090"]),
    util=st.floats(min_value=0.5, max_value=1.0),
)
def test_longer_context_never_raises_max_concurrency(len_a: int, len_b: int, gpu: str, util: float) -> None:
    short, long = sorted((len_a, len_b))

    def concurrency(tokens: int) -> int:
        try:
            model = stm("llama-3.1-8b", gpu=gpu)
            return plan_memory(model, tokens, gpu_memory_utilization=util).max_concurrency_memory
        except DoesNotFitError:
            return 0

    assert concurrency(short) >= concurrency(long)
