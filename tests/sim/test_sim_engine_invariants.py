"""Engine invariants under random workloads and knobs (hypothesis).

Whatever arrives and however the engine is configured: KV blocks in use never exceed the cache, a step
never holds more than max_num_seqs sequences or max_num_batched_tokens tokens, every request finishes
with exactly the tokens it asked for (preempted ones are resumed), and token times never go backwards.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llm_knee.sim.config import EngineConfig
from llm_knee.sim.engine import Engine, StepOutcome, StepTrace
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import SimConfig, simulate_arrivals
from tests.sim.toy import ToyStepModel

MAX_CONTEXT = 4096


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[EngineConfig, int, list[tuple[float, RequestSpec]]]:
    chunked = draw(st.booleans())
    max_num_seqs = draw(st.integers(1, 24))
    budget = draw(st.integers(max(max_num_seqs, 64), 1024))
    caching = draw(st.booleans())
    cfg = EngineConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        block_size=draw(st.sampled_from([1, 4, 16])),
        enable_prefix_caching=caching,
        prefix_hit_rate=draw(st.floats(0, 1)) if caching else 0.0,
        shared_prefix_tokens=draw(st.integers(0, 128)) if caching else 0,
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
    )
    max_prompt = 600 if chunked else budget
    n = draw(st.integers(1, 30))
    arrivals: list[tuple[float, RequestSpec]] = []
    t = 0.0
    for _ in range(n):
        t += draw(st.floats(0, 0.05))
        prompt = draw(st.integers(1, max_prompt))
        output = draw(st.integers(1, 120))
        arrivals.append((t, RequestSpec(prompt, output, priority=draw(st.integers(0, 3)))))
    # From "just fits the largest request" (heavy preemption) to roomy.
    largest = max(s.prompt_tokens + s.output_tokens for _, s in arrivals) + 200
    capacity = draw(st.integers(largest, largest * 3))
    return cfg, capacity, arrivals


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_for_any_workload(
    scenario: tuple[EngineConfig, int, list[tuple[float, RequestSpec]]],
) -> None:
    cfg, capacity, arrivals = scenario
    config = SimConfig(ToyStepModel(), MAX_CONTEXT, cfg, kv_capacity_tokens=capacity)
    trace: list[StepTrace] = []
    engines: list[Engine] = []

    def check(engine: Engine, outcome: StepOutcome) -> None:
        if not engines:
            engines.append(engine)
        engine.check_invariants()  # KV blocks, running sums, max_num_seqs: recomputed from scratch
        assert outcome.end_ns > outcome.start_ns

    result = simulate_arrivals(config, arrivals, on_step=check, trace=trace)
    event(f"preempted: {result.stats.preemptions > 0}")

    assert len(result.records) == len(arrivals)
    by_id = {r.request_id: r for r in result.records}
    for i, (t, spec) in enumerate(arrivals):
        rec = by_id[f"sim-{i}"]
        assert rec.output_tokens == spec.output_tokens == rec.output_chunks
        assert rec.scheduled_ns == round(t * 1e9)
        assert rec.first_token_ns > rec.scheduled_ns
        assert all(gap >= 0 for gap in rec.itl_ns)
        assert rec.first_token_ns + sum(rec.itl_ns) == rec.last_token_ns <= rec.end_ns
    engine = engines[0]
    total_blocks = engine.pool.total
    for step in trace:
        assert step.kv_used_blocks <= total_blocks
        assert step.n_decode + step.n_prefill_seqs <= cfg.max_num_seqs
        assert step.n_decode + step.n_prefill_tokens <= cfg.max_num_batched_tokens
    # Steps never overlap.
    for a, b in itertools.pairwise(trace):
        assert a.end_ns <= b.start_ns
    assert engine.pool.used == 0 and not engine.live
