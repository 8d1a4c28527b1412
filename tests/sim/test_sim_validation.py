"""Bad input is refused before anything runs, with a message saying what is wrong and what to do."""

from __future__ import annotations

import pytest

from llm_knee.sim.config import EngineConfig
from llm_knee.sim.engine import Engine
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import SimConfig, fixed_lengths, simulate_arrivals, simulate_closed_loop, simulate_open_loop
from tests.sim.toy import ToyStepModel


def engine(**knobs: object) -> Engine:
    return Engine(ToyStepModel(), EngineConfig(**knobs), max_context=4096)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (RequestSpec(0, 10), "must be positive"),
        (RequestSpec(10, 0), "must be positive"),
        (RequestSpec(-5, 10), "must be positive"),
        (RequestSpec(4000, 100), "exceeds the maximum context of 4096"),
    ],
)
def test_bad_lengths(spec: RequestSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        engine().add_request(spec, 0)


def test_max_model_len_caps_the_context() -> None:
    with pytest.raises(ValueError, match="maximum context of 1024"):
        engine(max_model_len=1024).validate(RequestSpec(1000, 100))


def test_prompt_over_the_budget_without_chunked_prefill_can_never_schedule() -> None:
    with pytest.raises(ValueError, match="can never schedule"):
        engine(enable_chunked_prefill=False, max_num_batched_tokens=512).validate(RequestSpec(600, 10))
    engine(enable_chunked_prefill=True, max_num_batched_tokens=512).validate(RequestSpec(600, 10))


def test_request_larger_than_the_whole_kv_cache() -> None:
    small = Engine(ToyStepModel(), EngineConfig(), max_context=4096, kv_capacity_tokens=1000)
    with pytest.raises(ValueError, match="needs 63 KV blocks but the whole cache holds 62"):
        small.validate(RequestSpec(900, 100))


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs must be at least 1"),
        ({"max_num_seqs": 512, "max_num_batched_tokens": 256}, "must be >= max_num_seqs"),
        ({"block_size": 0}, "block_size"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"prefix_hit_rate": 2.0}, "prefix_hit_rate"),
        ({"scheduling_policy": "lifo"}, "unknown scheduling_policy 'lifo'; known: fcfs, priority"),
        ({"on_kv_exhausted": "explode"}, "on_kv_exhausted"),
    ],
)
def test_bad_knobs(knobs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        engine(**knobs)


def test_runs_refuse_bad_requests_and_times_before_running() -> None:
    config = SimConfig(ToyStepModel(), 4096)
    with pytest.raises(ValueError, match="exceeds the maximum context"):
        simulate_closed_loop(config, 4, 10, sampler=fixed_lengths(4000, 200))
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        simulate_closed_loop(config, 0, 10, sampler=fixed_lengths(10, 10))
    with pytest.raises(ValueError, match="duration_s"):
        simulate_closed_loop(config, 1, 0, sampler=fixed_lengths(10, 10))
    with pytest.raises(ValueError, match="rate_rps"):
        simulate_open_loop(config, 0.0, 10, sampler=fixed_lengths(10, 10))
    with pytest.raises(ValueError, match="unknown arrival process"):
        simulate_open_loop(config, 1.0, 10, sampler=fixed_lengths(10, 10), arrival="bursty")
    with pytest.raises(ValueError, match="arrival 1: prompt and output lengths must be positive"):
        simulate_arrivals(config, [(0.0, RequestSpec(5, 5)), (1.0, RequestSpec(5, 0))])
    with pytest.raises(ValueError, match="earlier than the one before"):
        simulate_arrivals(config, [(1.0, RequestSpec(5, 5)), (0.5, RequestSpec(5, 5))])
