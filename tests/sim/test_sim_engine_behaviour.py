"""How the engine model behaves: preemption, priority, prefix caching, chunked prefill, aborts."""

from __future__ import annotations

import pytest

from llm_knee.sim.config import EngineConfig, KvExhaustedError
from llm_knee.sim.engine import Engine, StepTrace
from llm_knee.sim.request import RequestSpec, SimRequest, State
from llm_knee.sim.runs import SimConfig, simulate_arrivals
from tests.sim.toy import ToyStepModel


def drive(engine: Engine, now: int = 0) -> int:
    """Run the engine until idle, checking its invariants between steps; return the end time."""
    while True:
        dur = engine.begin_step(now)
        if dur is None:
            return now
        now += dur
        engine.end_step()
        engine.check_invariants()


def test_preemption_when_kv_is_short_and_every_request_still_finishes() -> None:
    # Room for ~2.5 requests of 300 tokens: 8 concurrent ones must preempt and recompute.
    engine = Engine(ToyStepModel(), EngineConfig(max_num_seqs=8), max_context=4096, kv_capacity_tokens=800)
    reqs = [engine.add_request(RequestSpec(100, 200), 0) for _ in range(8)]
    drive(engine)
    assert engine.num_preemptions > 0
    assert any(r.preemptions for r in reqs)
    for r in reqs:
        assert r.state is State.FINISHED
        assert r.generated == 200 and len(r.times) == 200
        assert list(r.times) == sorted(r.times)
    assert engine.pool.used == 0


def test_fcfs_preempts_the_newest_request() -> None:
    engine = Engine(ToyStepModel(), EngineConfig(max_num_seqs=4), max_context=4096, kv_capacity_tokens=480)
    reqs = [engine.add_request(RequestSpec(64, 150), 0) for _ in range(3)]
    drive(engine)
    assert reqs[0].preemptions == 0
    assert reqs[-1].preemptions > 0


def test_priority_policy_serves_high_priority_first() -> None:
    cfg = EngineConfig(max_num_seqs=1, max_num_batched_tokens=64, scheduling_policy="priority")
    config = SimConfig(ToyStepModel(), 4096, cfg)
    # Four low-priority requests arrive first, then two high-priority ones while the first runs.
    arrivals = [(0.0, RequestSpec(32, 20, priority=5)) for _ in range(4)]
    arrivals += [(0.001, RequestSpec(32, 20, priority=0)) for _ in range(2)]
    result = simulate_arrivals(config, arrivals)
    order = [r.request_id for r in sorted(result.records, key=lambda r: r.first_token_ns)]
    assert order == ["sim-0", "sim-4", "sim-5", "sim-1", "sim-2", "sim-3"]

    fcfs = simulate_arrivals(
        SimConfig(ToyStepModel(), 4096, EngineConfig(max_num_seqs=1, max_num_batched_tokens=64)), arrivals
    )
    order = [r.request_id for r in sorted(fcfs.records, key=lambda r: r.first_token_ns)]
    assert order == [f"sim-{i}" for i in range(6)]


def test_priority_policy_preempts_the_lowest_priority() -> None:
    cfg = EngineConfig(max_num_seqs=4, scheduling_policy="priority")
    engine = Engine(ToyStepModel(), cfg, max_context=4096, kv_capacity_tokens=480)
    low = engine.add_request(RequestSpec(64, 150, priority=9), 0)
    high = [engine.add_request(RequestSpec(64, 150, priority=0), 0) for _ in range(2)]
    drive(engine)
    assert low.preemptions > 0
    assert all(r.preemptions == 0 for r in high)


def test_prefix_cache_hits_skip_prefill_and_share_blocks() -> None:
    def run(hit_rate: float) -> tuple[list[int], int]:
        cfg = EngineConfig(enable_prefix_caching=True, prefix_hit_rate=hit_rate, shared_prefix_tokens=1024)
        engine = Engine(ToyStepModel(), cfg, max_context=4096)
        reqs = [engine.add_request(RequestSpec(1100, 4), 0) for _ in range(4)]
        engine.begin_step(0)
        peak = engine.pool.used
        engine.end_step()
        drive(engine, 1)
        return [r.first_token_ns for r in reqs], peak

    ttft_miss, blocks_miss = run(0.0)
    ttft_hit, blocks_hit = run(1.0)
    assert max(ttft_hit) < min(ttft_miss)
    # 4 private copies of 1100 tokens vs one shared 1024-token prefix plus 4 private tails.
    assert blocks_miss == 4 * 69
    assert blocks_hit == 64 + 4 * 5


def test_prefix_hit_still_computes_the_last_prompt_token() -> None:
    cfg = EngineConfig(enable_prefix_caching=True, prefix_hit_rate=1.0, shared_prefix_tokens=512)
    engine = Engine(ToyStepModel(), cfg, max_context=4096)
    req = engine.add_request(RequestSpec(512, 2), 0)
    assert req.hit_tokens == 496  # whole blocks only, and never the last prompt token
    drive(engine)
    assert req.state is State.FINISHED


def test_chunked_prefill_splits_long_prompts_and_unchunked_runs_them_whole() -> None:
    def prefill_steps(chunked: bool, budget: int) -> list[StepTrace]:
        trace: list[StepTrace] = []
        cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=budget, enable_chunked_prefill=chunked)
        simulate_arrivals(SimConfig(ToyStepModel(), 4096, cfg), [(0.0, RequestSpec(1000, 3))], trace=trace)
        return [s for s in trace if s.n_prefill_tokens]

    chunked = prefill_steps(True, 256)
    assert [s.n_prefill_tokens for s in chunked] == [256, 256, 256, 232]
    whole = prefill_steps(False, 1024)
    assert [s.n_prefill_tokens for s in whole] == [1000]


def test_decodes_are_never_starved_by_a_long_prefill() -> None:
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=128)
    trace: list[StepTrace] = []
    arrivals = [(0.0, RequestSpec(16, 50)), (0.005, RequestSpec(2000, 2))]
    simulate_arrivals(SimConfig(ToyStepModel(), 4096, cfg), arrivals, trace=trace)
    mixed = [s for s in trace if s.n_prefill_tokens]
    assert any(s.n_decode == 1 and s.n_prefill_tokens == 127 for s in mixed)


def test_abort_frees_everything_in_any_state() -> None:
    engine = Engine(ToyStepModel(), EngineConfig(max_num_seqs=2, max_num_batched_tokens=64), max_context=4096)
    a = engine.add_request(RequestSpec(10, 100), 0, "a")
    b = engine.add_request(RequestSpec(500, 100), 0, "b")
    c = engine.add_request(RequestSpec(10, 100), 0, "c")
    now = 0
    for _ in range(3):
        now += engine.begin_step(now) or 0
        engine.end_step()
    assert (a.state, b.state, c.state) == (State.DECODE, State.PREFILL, State.WAITING)
    assert engine.abort("c") and engine.abort("a")
    engine.begin_step(now)
    assert engine.abort("b")  # during a step: applied when the step ends
    engine.end_step()
    assert not engine.abort("b")
    engine.check_invariants()
    assert engine.pool.used == 0 and not engine.has_work
    assert all(r.state is State.ABORTED for r in (a, b, c))


def test_crash_mode_raises_instead_of_preempting() -> None:
    cfg = EngineConfig(max_num_seqs=8, on_kv_exhausted="crash")
    engine = Engine(ToyStepModel(), cfg, max_context=4096, kv_capacity_tokens=800)
    for _ in range(8):
        engine.add_request(RequestSpec(100, 200), 0)
    with pytest.raises(KvExhaustedError, match="KV cache exhausted"):
        drive(engine)


def test_token_times_are_materialised_while_decoding() -> None:
    engine = Engine(ToyStepModel(), EngineConfig(), max_context=4096)
    req: SimRequest = engine.add_request(RequestSpec(10, 5), 0)
    now = 0
    for _ in range(3):
        now += engine.begin_step(now) or 0
        engine.end_step()
    assert engine.generated(req) == 3
    assert engine.token_times(req) == list(engine.step_ends[:3])


def test_old_step_times_are_dropped_but_live_requests_keep_theirs() -> None:
    engine = Engine(ToyStepModel(), EngineConfig(), max_context=200_000, kv_capacity_tokens=200_000)
    long = engine.add_request(RequestSpec(10, 70_000), 0)
    now = 0
    while engine.k < 66_000:
        if engine.num_running < 2:
            engine.add_request(RequestSpec(10, 20), now)
        now += engine.begin_step(now) or 0
        engine.end_step()
    # The long request still needs everything since its first decode step, so little could be dropped.
    assert engine.step_base <= long.s0
    now = drive(engine, now)
    assert long.state is State.FINISHED and len(long.times) == 70_000
    assert list(long.times) == sorted(set(long.times))
    while engine.k < 140_000:
        engine.add_request(RequestSpec(10, 20), now)
        now = drive(engine, now)
    assert engine.step_base > 100_000 and len(engine.step_ends) < 40_000
