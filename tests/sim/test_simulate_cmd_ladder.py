"""The shared simulated ladder: rungs, extension rule, one timeline, and engine telemetry under server names."""

from __future__ import annotations

from llm_knee.analysis.summary import LevelSummary, Window, summarize_level
from llm_knee.records.schema import TelemetrySample
from llm_knee.sim.config import EngineConfig
from llm_knee.sim.ladder import (
    LevelTiming,
    as_server_telemetry,
    extend_while_climbing,
    next_ladder_step,
    simulate_ladder,
)
from llm_knee.sim.runs import SimConfig, fixed_lengths
from llm_knee.telemetry import names
from tests.sim.toy import ToyStepModel


def _summary(level: float, tok_s: float) -> LevelSummary:
    s = summarize_level([], level_index=0, level=level, mode="closed", window=Window(0, 1_000_000_000))
    s.output_tok_s = tok_s
    return s


def test_rungs_after_64_alternate_half_steps_and_doublings() -> None:
    rungs = [64]
    while rungs[-1] < 1024:
        rungs.append(next_ladder_step(rungs[-1]))
    assert rungs == [64, 96, 128, 192, 256, 384, 512, 768, 1024]
    assert next_ladder_step(40) == 48 and next_ladder_step(48) == 64 and next_ladder_step(1) == 2


def test_extension_needs_five_percent_gain_and_stops_at_the_cap() -> None:
    grow = extend_while_climbing(cap=128)
    assert grow([_summary(48, 1000.0), _summary(64, 1060.0)]) == 96
    assert grow([_summary(48, 1000.0), _summary(64, 1049.0)]) is None
    assert grow([_summary(96, 1000.0), _summary(128, 2000.0)]) is None  # 192 > cap
    assert grow([_summary(64, 1000.0)]) is None


def test_engine_names_become_server_names() -> None:
    samples = [
        TelemetrySample(1, "engine", "engine.requests_waiting", 3.0),
        TelemetrySample(1, "engine", "engine.requests_running", 5.0),
        TelemetrySample(1, "engine", "engine.kv_cache_usage", 0.5),
        TelemetrySample(1, "engine", "engine.preemptions_total", 2.0),
    ]
    renamed = as_server_telemetry(samples)
    assert [s.name for s in renamed] == [
        names.SERVER_REQUESTS_WAITING,
        names.SERVER_REQUESTS_RUNNING,
        names.SERVER_KV_USAGE,
        names.SERVER_PREEMPTIONS_TOTAL,
    ]
    assert [s.value for s in renamed] == [3.0, 5.0, 0.5, 2.0]


def test_levels_share_one_timeline_without_overlap() -> None:
    cfg = SimConfig(ToyStepModel(), 4096, EngineConfig(max_num_seqs=8, max_num_batched_tokens=512))
    run = simulate_ladder(
        cfg,
        [1, 4, 16],
        sampler_for=lambda i: fixed_lengths(64, 16),
        timing_for=lambda c: LevelTiming(ramp_up_s=0.2, warmup_s=0.5, measure_s=2.0),
    )
    assert run.concurrencies == [1, 4, 16]
    for before, after in zip(run.levels, run.levels[1:], strict=False):
        assert after.window.start_ns > before.stats.sim_end_ns
        assert after.window.start_ns > before.window.end_ns
    for lv in run.levels:
        assert lv.window.end_ns - lv.window.start_ns == 2_000_000_000
        assert lv.summary.requests > 0 and lv.drain_s >= 0
    assert {s.source for s in run.telemetry} == {"engine"}
    assert all(not s.name.startswith("engine.") for s in run.telemetry)
    # 16 users on 8 sequences per step: the third level's queue never empties.
    waiting = [
        s.value
        for s in run.telemetry
        if s.name == names.SERVER_REQUESTS_WAITING
        and run.levels[2].window.start_ns <= s.t_ns < run.levels[2].window.end_ns
    ]
    assert waiting and min(waiting) > 0
