"""Closed- and open-loop simulation produce the project's records and engine telemetry."""

from __future__ import annotations

import itertools
import random

from llm_knee.records.schema import ErrorClass
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import (
    SimConfig,
    fixed_lengths,
    sampler_from_lengths,
    simulate_closed_loop,
    simulate_open_loop,
)
from tests.sim.toy import ToyStepModel

CONFIG = SimConfig(ToyStepModel(), 4096, telemetry_interval_s=0.5)


def test_closed_loop_keeps_concurrency_and_marks_warmup() -> None:
    result = simulate_closed_loop(CONFIG, 8, 10.0, warmup_s=2.0, sampler=fixed_lengths(64, 32), seed=3, level_index=2)
    records = result.records
    assert records and all(r.ok and r.error is ErrorClass.OK and r.http_status == 200 for r in records)
    assert {r.level for r in records} == {8.0} and {r.level_index for r in records} == {2}
    assert {r.worker for r in records} == set(range(8))
    warm = [r for r in records if r.warmup]
    assert warm and all(r.scheduled_ns < 2e9 for r in warm)
    assert all(r.scheduled_ns >= 2e9 for r in records if not r.warmup)
    # No request is sent after the level ends; those in flight are completed.
    assert max(r.scheduled_ns for r in records) < 12e9
    for r in records:
        assert r.prompt_tokens == r.prompt_tokens_server == 64
        assert r.output_tokens == r.output_tokens_requested == r.output_chunks == 32
        assert len(r.itl_ns) == 31 and r.tpot_ns is not None and r.ttft_ns is not None and r.ttft_ns > 0
    # Each user's next request starts the instant its previous one ends.
    by_user: dict[int, list[tuple[int, int]]] = {}
    for r in sorted(records, key=lambda r: r.scheduled_ns):
        by_user.setdefault(r.worker, []).append((r.scheduled_ns, r.end_ns))
    for spans in by_user.values():
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start == end


def test_engine_telemetry_samples_on_the_same_clock() -> None:
    result = simulate_closed_loop(CONFIG, 8, 5.0, sampler=fixed_lengths(64, 32))
    names = {s.name for s in result.telemetry}
    assert names == {
        "engine.requests_running",
        "engine.requests_waiting",
        "engine.kv_cache_usage",
        "engine.preemptions_total",
    }
    assert {s.source for s in result.telemetry} == {"engine"}
    running = [s for s in result.telemetry if s.name == "engine.requests_running"]
    assert [s.t_ns for s in running[:4]] == [0, 500_000_000, 1_000_000_000, 1_500_000_000]
    assert max(s.value for s in running) == 8
    usage = [s.value for s in result.telemetry if s.name == "engine.kv_cache_usage"]
    assert 0 < max(usage) <= 1


def test_same_seed_same_records() -> None:
    def sampler(rng: random.Random) -> RequestSpec:
        return RequestSpec(rng.randint(10, 300), rng.randint(5, 60))

    a = simulate_closed_loop(CONFIG, 6, 5.0, sampler=sampler, seed=7)
    b = simulate_closed_loop(CONFIG, 6, 5.0, sampler=sampler, seed=7)
    c = simulate_closed_loop(CONFIG, 6, 5.0, sampler=sampler, seed=8)
    assert [r.to_dict() for r in a.records] == [r.to_dict() for r in b.records]
    assert [r.to_dict() for r in a.records] != [r.to_dict() for r in c.records]


def test_open_loop_rates() -> None:
    constant = simulate_open_loop(CONFIG, 4.0, 10.0, sampler=fixed_lengths(32, 8), arrival="constant")
    assert [r.scheduled_ns for r in constant.records[:3]] == [0, 250_000_000, 500_000_000]
    assert len(constant.records) == 40 and {r.level for r in constant.records} == {4.0}
    poisson = simulate_open_loop(CONFIG, 20.0, 30.0, sampler=fixed_lengths(32, 8), seed=1)
    assert 500 < len(poisson.records) < 700  # 600 expected
    assert all(r.sent_ns == r.scheduled_ns for r in poisson.records)


def test_overload_shows_as_queueing_in_ttft() -> None:
    # Far more arrivals than the engine can serve: TTFT (from the scheduled time) keeps growing.
    result = simulate_open_loop(CONFIG, 400.0, 3.0, sampler=fixed_lengths(512, 64), arrival="constant")
    ttfts = [r.ttft_ns or 0 for r in sorted(result.records, key=lambda r: r.scheduled_ns)]
    assert ttfts[-1] > 10 * ttfts[0]


def test_on_record_streams_records_instead_of_keeping_them() -> None:
    seen: list[str] = []
    result = simulate_closed_loop(
        CONFIG, 4, 2.0, sampler=fixed_lengths(16, 8), on_record=lambda r: seen.append(r.request_id)
    )
    assert seen and result.records == []
    assert result.stats.requests_finished == len(seen)


def test_levels_can_share_one_timeline() -> None:
    first = simulate_closed_loop(CONFIG, 4, 3.0, sampler=fixed_lengths(32, 16))
    later = simulate_closed_loop(CONFIG, 4, 3.0, warmup_s=1.0, sampler=fixed_lengths(32, 16), start_s=100.0)
    shift = 100_000_000_000
    assert min(r.scheduled_ns for r in later.records) == shift
    assert min(s.t_ns for s in later.telemetry) == shift
    assert all(r.warmup == (r.scheduled_ns < shift + 1_000_000_000) for r in later.records)
    # Same engine behaviour, just later.
    assert (
        sorted(r.end_ns - r.scheduled_ns for r in first.records)[:4]
        == sorted(r.end_ns - r.scheduled_ns for r in later.records)[:4]
    )
    opened = simulate_open_loop(CONFIG, 2.0, 2.0, sampler=fixed_lengths(8, 4), arrival="constant", start_s=50.0)
    assert [r.scheduled_ns for r in opened.records] == [50_000_000_000 + i * 500_000_000 for i in range(4)]


def test_lengths_from_the_workload_distributions() -> None:
    from llm_knee.workload.lengths import LengthDist

    sampler = sampler_from_lengths(LengthDist.uniform(100, 200), LengthDist.fixed(20), seed=4)
    result = simulate_closed_loop(CONFIG, 4, 3.0, sampler=sampler, seed=4)
    prompts = {r.prompt_tokens for r in result.records}
    assert len(prompts) > 5 and min(prompts) >= 100 and max(prompts) <= 200
    assert {r.output_tokens for r in result.records} == {20}
