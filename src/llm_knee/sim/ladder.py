"""A concurrency ladder run in simulated time, summarised exactly as a measured sweep is.

Levels run one after another on one simulated timeline (each starts when the one before has drained), so
records, windows and engine telemetry share one clock as a measured run's do. Each level ramps its users
up, warms up, then measures for ``LevelTiming.measure_s``; only requests started in the measured window
count (``summarize_level`` with that window). Records are summarised level by level and dropped: a long
ladder at high concurrency would not fit in memory otherwise.

Engine telemetry is renamed to the server names of ``telemetry.names`` (engine.requests_waiting ->
server.requests_waiting, ...), so the analysis' queueing verdicts read a simulation like a vLLM /metrics
scrape.

    run = simulate_ladder(cfg, [1, 2, 4, 8], sampler_for=lambda i: fixed_lengths(512, 256),
                          timing_for=lambda c: LevelTiming(ramp_up_s=2, warmup_s=6, measure_s=60))
    run.summaries, run.windows, run.telemetry
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llm_knee.analysis.slo import Objective
from llm_knee.analysis.summary import LevelSummary, Window, summarize_level
from llm_knee.records.schema import TelemetrySample
from llm_knee.sim.loop import RequestSampler, SimStats
from llm_knee.sim.runs import NS, SimConfig, simulate_closed_loop
from llm_knee.telemetry import names
from llm_knee.telemetry.summarize import LevelWindow

# What the engine's telemetry ticks (sim.events.TelemetryTick) are called among the server metrics.
ENGINE_TO_SERVER_NAMES: dict[str, str] = {
    "engine.requests_running": names.SERVER_REQUESTS_RUNNING,
    "engine.requests_waiting": names.SERVER_REQUESTS_WAITING,
    "engine.kv_cache_usage": names.SERVER_KV_USAGE,
    "engine.preemptions_total": names.SERVER_PREEMPTIONS_TOTAL,
}


def as_server_telemetry(samples: Sequence[TelemetrySample]) -> list[TelemetrySample]:
    """Engine samples under the normalised server names (source stays "engine"); other names unchanged."""
    return [
        TelemetrySample(s.t_ns, s.source, ENGINE_TO_SERVER_NAMES.get(s.name, s.name), s.value, s.labels, s.session)
        for s in samples
    ]


@dataclass(frozen=True)
class LevelTiming:
    """Simulated seconds of one level: users start spread over ``ramp_up_s``; everything before
    ``warmup_s`` (ramp-up included) is discarded; the next ``measure_s`` are measured."""

    ramp_up_s: float
    warmup_s: float
    measure_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.measure_s) and self.measure_s > 0):
            raise ValueError(f"measured seconds per level must be positive (got {self.measure_s})")
        if not (math.isfinite(self.warmup_s) and math.isfinite(self.ramp_up_s)):
            raise ValueError(f"warm-up and ramp-up must be finite (got {self.warmup_s}, {self.ramp_up_s})")
        if not 0 <= self.ramp_up_s <= self.warmup_s:
            raise ValueError(f"ramp-up ({self.ramp_up_s} s) must lie within the warm-up ({self.warmup_s} s)")


@dataclass(frozen=True)
class SimulatedLevel:
    index: int
    concurrency: int
    timing: LevelTiming
    window: Window  # the measured part, on the ladder's timeline
    summary: LevelSummary
    stats: SimStats
    drain_s: float  # from the end of sending to the last request's end


@dataclass
class LadderRun:
    levels: list[SimulatedLevel] = field(default_factory=list)
    telemetry: list[TelemetrySample] = field(default_factory=list)  # every level's, server names
    extended: list[int] = field(default_factory=list)  # levels added by ``extend`` after the given ones

    @property
    def summaries(self) -> list[LevelSummary]:
        return [lv.summary for lv in self.levels]

    @property
    def concurrencies(self) -> list[int]:
        return [lv.concurrency for lv in self.levels]

    @property
    def preemptions(self) -> list[int]:
        return [lv.stats.preemptions for lv in self.levels]

    @property
    def windows(self) -> list[LevelWindow]:
        return [
            LevelWindow(lv.index, float(lv.concurrency), lv.window.start_ns, lv.window.end_ns) for lv in self.levels
        ]


NextLevel = Callable[[Sequence[LevelSummary]], int | None]
"""Given the summaries so far, the next concurrency to run, or None to stop."""


def next_ladder_step(level: int) -> int:
    """The next rung above ``level`` on the ladder 64, 96, 128, 192, 256, 384 ... (2^k and 3 * 2^(k-1))."""
    if level < 1:
        return 1
    k = level.bit_length() - 1  # 2^k <= level < 2^(k+1)
    half = 3 << (k - 1) if k >= 1 else 2
    return half if level < half else 1 << (k + 1)


def extend_while_climbing(cap: int, min_gain: float = 0.05) -> NextLevel:
    """Extend the ladder (96, 128, 192, 256 ... after 64) while output throughput still grew by at least
    ``min_gain`` over the last step, up to ``cap`` users."""

    def next_level(summaries: Sequence[LevelSummary]) -> int | None:
        if len(summaries) < 2:
            return None
        prev, last = summaries[-2].output_tok_s, summaries[-1].output_tok_s
        if prev <= 0 or last < prev * (1.0 + min_gain):
            return None
        nxt = next_ladder_step(int(summaries[-1].level))
        return nxt if nxt <= cap else None

    return next_level


def simulate_ladder(
    config: SimConfig,
    levels: Sequence[int],
    *,
    sampler_for: Callable[[int], RequestSampler],
    timing_for: Callable[[int], LevelTiming],
    seed: int = 0,
    slo: Sequence[Objective] = (),
    extend: NextLevel | None = None,
    on_level: Callable[[SimulatedLevel], None] | None = None,
) -> LadderRun:
    """Run each concurrency of ``levels`` in closed loop, then the ones ``extend`` asks for.

    ``sampler_for(index)`` gives the level's request sampler and ``timing_for(concurrency)`` its timing;
    level ``index`` is simulated with seed ``seed + index``. ``on_level`` sees each level as it finishes.
    """
    if not levels:
        raise ValueError("the ladder needs at least one level")
    for c in levels:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"concurrency levels must be whole numbers >= 1 (got {c!r})")
    run = LadderRun()
    queue = list(levels)
    start_ns = 0
    index = 0
    while True:
        if index >= len(queue):
            nxt = extend(run.summaries) if extend is not None else None
            if nxt is None or nxt <= queue[-1]:
                break
            queue.append(nxt)
            run.extended.append(nxt)
        c = queue[index]
        timing = timing_for(c)
        result = simulate_closed_loop(
            config,
            c,
            timing.measure_s,
            sampler=sampler_for(index),
            warmup_s=timing.warmup_s,
            seed=seed + index,
            level_index=index,
            ramp_up_s=timing.ramp_up_s,
            start_s=start_ns / NS,
        )
        # start_s goes through float seconds; the loop rounds it back to the same whole ns.
        level_start = round(start_ns / NS * NS)
        measure_start = level_start + round(timing.warmup_s * NS)
        window = Window(measure_start, measure_start + round(timing.measure_s * NS))
        summary = summarize_level(
            result.records, level_index=index, level=float(c), mode="closed", window=window, slo=slo
        )
        end_ns = max(result.stats.sim_end_ns, window.end_ns)
        summary.drain_s = (end_ns - window.end_ns) / NS
        level = SimulatedLevel(index, c, timing, window, summary, result.stats, summary.drain_s)
        run.levels.append(level)
        run.telemetry.extend(as_server_telemetry(result.telemetry))
        if on_level is not None:
            on_level(level)
        # One simulated second of idle between levels keeps their telemetry ticks apart.
        start_ns = end_ns + NS
        index += 1
    return run
