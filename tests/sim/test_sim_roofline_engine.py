"""The engine timed by the real roofline StepTimeModel: exact single-request timing and monotonic effects."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_knee.catalog.dtypes import get_dtype
from llm_knee.catalog.hardware import get_gpu
from llm_knee.catalog.models import get_model
from llm_knee.plan.roofline import DoesNotFitError, StepTimeModel
from llm_knee.sim.config import EngineConfig
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import SimConfig, fixed_lengths, simulate_arrivals, simulate_closed_loop

LLAMA8 = get_model("Llama-3.1-8B")
H100 = get_gpu("H100-SXM")
BF16 = get_dtype("bf16")


def config_for(bandwidth_scale: float = 1.0, engine: EngineConfig | None = None) -> SimConfig:
    gpu = dataclasses.replace(H100, bandwidth_bytes_s=H100.bandwidth_bytes_s * bandwidth_scale)
    return SimConfig(StepTimeModel(LLAMA8, gpu, BF16), LLAMA8.max_context, engine or EngineConfig())


def test_from_catalog_sizes_the_kv_cache_from_gpu_memory_utilization() -> None:
    cfg = SimConfig.from_catalog("llama-3.1-8b", "h100", "bf16")
    model = StepTimeModel(LLAMA8, H100, BF16)
    assert cfg.build_engine().pool.total == model.kv_capacity_tokens(0.9, 8192) // 16
    tighter = SimConfig.from_catalog("llama-3.1-8b", "h100", engine=EngineConfig(gpu_memory_utilization=0.5))
    assert tighter.build_engine().pool.total < cfg.build_engine().pool.total


def test_from_catalog_refuses_a_model_that_does_not_fit() -> None:
    with pytest.raises(DoesNotFitError, match="short by"):
        SimConfig.from_catalog("Llama-3.1-70B", "H100-SXM", "bf16")


def test_single_request_timing_is_exactly_the_step_model() -> None:
    cfg = config_for()
    model = cfg.step_model
    result = simulate_arrivals(cfg, [(0.0, RequestSpec(512, 4))])
    (rec,) = result.records
    assert rec.ttft_ns == round(model.step_time_s(512, 512 * 256.0, 0, 0) * 1e9)
    # Decode step i reads the KV of the prompt plus the tokens so far, plus the one it writes.
    assert rec.itl_ns == [round(model.step_time_s(0, 0.0, 1, 512 + i + 1) * 1e9) for i in range(3)]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 64),
    prompt=st.integers(16, 2048),
    output=st.integers(2, 64),
    scale=st.floats(1.0, 4.0),
)
def test_more_bandwidth_never_slows_decode(n: int, prompt: int, output: int, scale: float) -> None:
    arrivals = [(0.0, RequestSpec(prompt, output)) for _ in range(n)]
    base = {r.request_id: r for r in simulate_arrivals(config_for(1.0), arrivals).records}
    fast = {r.request_id: r for r in simulate_arrivals(config_for(scale), arrivals).records}
    for rid, rec in base.items():
        fast_tpot, base_tpot = fast[rid].tpot_ns, rec.tpot_ns
        assert fast_tpot is not None and base_tpot is not None
        assert fast_tpot <= base_tpot
        assert fast[rid].end_ns <= rec.end_ns


def test_more_bandwidth_raises_closed_loop_throughput() -> None:
    def tokens_per_s(scale: float) -> float:
        res = simulate_closed_loop(
            config_for(scale), 32, 20.0, warmup_s=5.0, sampler=fixed_lengths(512, 128), ramp_up_s=1.0
        )
        return sum(r.output_tokens for r in res.records if not r.warmup) / 20.0

    rates = [tokens_per_s(s) for s in (1.0, 1.5, 2.0)]
    assert rates == sorted(rates)


def test_longer_prompts_never_raise_saturation_throughput() -> None:
    def saturated_output_rate(prompt: int) -> float:
        res = simulate_closed_loop(
            config_for(), 256, 20.0, warmup_s=10.0, sampler=fixed_lengths(prompt, 128), ramp_up_s=2.0
        )
        return sum(r.output_tokens for r in res.records if not r.warmup) / 20.0

    rates = [saturated_output_rate(p) for p in (128, 512, 1024, 2048)]
    assert rates == sorted(rates, reverse=True)
    assert rates[0] > 1.5 * rates[-1]


def test_saturation_shows_in_ttft_not_in_throughput() -> None:
    # Past max_num_seqs, extra users only wait: throughput stays, median TTFT grows with the queue.
    engine = EngineConfig(max_num_seqs=32, max_num_batched_tokens=4096)

    def level(users: int) -> tuple[float, float]:
        res = simulate_closed_loop(
            config_for(engine=engine), users, 20.0, warmup_s=5.0, sampler=fixed_lengths(256, 128), ramp_up_s=1.0
        )
        kept = [r for r in res.records if not r.warmup]
        return sum(r.output_tokens for r in kept) / 20.0, statistics.median(r.ttft_ns or 0 for r in kept)

    (tput32, ttft32), (tput128, ttft128) = level(32), level(128)
    assert abs(tput128 - tput32) / tput32 < 0.1
    assert ttft128 > 3 * ttft32
