"""Verdicts on constructed timelines: each names the level where its condition first holds, or nothing.

Levels are 60 s long and sampled at 1 Hz, like a ``knee find`` ladder: level i covers [60 i, 60 i + 60) s.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llm_knee.analysis.verdicts import (
    Severity,
    all_verdicts,
    client_bound,
    client_bound_levels,
    client_ttft_means,
    latency_knee_from_queue,
    memory_pressure,
    power_wall,
    queueing,
    server_cpu_bound,
    ttft_gap,
)
from llm_knee.records.schema import ErrorClass, RequestRecord, TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.summarize import LevelWindow

S = 1_000_000_000
LEVELS = (1, 4, 16, 64)
WINDOWS = [LevelWindow(i, c, 60 * i * S, 60 * (i + 1) * S) for i, c in enumerate(LEVELS)]


def series(
    name: str, value: Callable[[int], float | None], seconds: range = range(240), source: str = "test", **labels: str
) -> list[TelemetrySample]:
    """One sample per second where ``value(t)`` is not None."""
    out = []
    for t in seconds:
        v = value(t)
        if v is not None:
            out.append(TelemetrySample(t * S, source, name, float(v), dict(labels)))
    return out


def gpu_timeline(
    power: Callable[[int], float], clock: Callable[[int], float], throttle: Callable[[int], int] = lambda t: 0
) -> list[TelemetrySample]:
    """GPU 0 with a 700 W limit and a 1980 MHz max clock; throttle is an NVML reason bitmask."""
    out = series(names.GPU_POWER_W, power, gpu="0")
    out += series(names.GPU_POWER_LIMIT_W, lambda t: 700.0, gpu="0")
    out += series(names.GPU_SM_CLOCK_MHZ, clock, gpu="0")
    out += series(names.GPU_SM_CLOCK_MAX_MHZ, lambda t: 1980.0, gpu="0")
    for bit, reason in ((0x4, "sw_power_cap"), (0x40, "hw_thermal_slowdown")):
        out += series(names.GPU_THROTTLE_PREFIX + reason, lambda t, b=bit: float(bool(throttle(t) & b)), gpu="0")
    return out


# --- power wall ---


def test_power_at_the_limit_with_falling_clocks_is_a_power_wall() -> None:
    # Level 2 (t 120-179): power reaches 690 W at t=130 and stays; clocks sag from 1980 to 1700.
    timeline = gpu_timeline(
        power=lambda t: 690.0 if t >= 130 else 300.0 + t,
        clock=lambda t: 1700.0 if t >= 135 else 1980.0,
    )
    verdict = power_wall(timeline, WINDOWS)
    assert verdict is not None
    assert (verdict.name, verdict.level_index, verdict.level) == ("power_wall", 2, 16)
    assert verdict.severity is Severity.WARNING
    assert "GPU 0" in verdict.evidence and "690–690 W" in verdict.evidence and "50 s" in verdict.evidence
    assert "1700 MHz" in verdict.evidence and "14%" in verdict.evidence


def test_a_clock_drop_without_power_at_the_limit_is_not_a_power_wall() -> None:
    # Thermal slowdown at moderate power: clocks fall 25 %, but power never nears the limit.
    timeline = gpu_timeline(
        power=lambda t: 450.0,
        clock=lambda t: 1480.0 if t >= 100 else 1980.0,
        throttle=lambda t: 0x40 if t >= 100 else 0,
    )
    assert power_wall(timeline, WINDOWS) is None


def test_power_at_the_limit_with_steady_clocks_is_not_a_power_wall() -> None:
    timeline = gpu_timeline(power=lambda t: 680.0, clock=lambda t: 1980.0 - (t % 3) * 15)
    assert power_wall(timeline, WINDOWS) is None


def test_a_short_power_spike_is_not_a_power_wall() -> None:
    timeline = gpu_timeline(
        power=lambda t: 695.0 if 150 <= t < 170 else 400.0,
        clock=lambda t: 1600.0 if 150 <= t < 170 else 1980.0,
    )
    assert power_wall(timeline, WINDOWS) is None
    assert power_wall(timeline, WINDOWS, min_duration_s=15.0) is not None


def test_nvml_power_cap_reason_held_long_enough_is_a_power_wall_by_itself() -> None:
    # The driver caps power on its own averaging window; our 1 Hz readings may show power a bit lower.
    held = gpu_timeline(power=lambda t: 600.0, clock=lambda t: 1900.0, throttle=lambda t: 0x4 if t >= 190 else 0)
    verdict = power_wall(held, WINDOWS)
    assert verdict is not None and verdict.level_index == 3
    assert "sw_power_cap held for 50 s" in verdict.evidence
    brief = gpu_timeline(power=lambda t: 600.0, clock=lambda t: 1900.0, throttle=lambda t: 0x4 if 190 <= t < 205 else 0)
    assert power_wall(brief, WINDOWS) is None


# --- memory ---


def test_memory_peak_above_ninety_percent_names_its_level() -> None:
    timeline = series(names.GPU_MEMORY_USED_FRAC, lambda t: 0.80 + t / 2400, gpu="1")  # 0.80 → 0.90 at t=240
    assert memory_pressure(timeline, WINDOWS) is None
    timeline = series(names.GPU_MEMORY_USED_FRAC, lambda t: 0.93 if t == 100 else 0.85, gpu="1")
    verdict = memory_pressure(timeline, WINDOWS)
    assert verdict is not None and verdict.level_index == 1
    assert "GPU 1" in verdict.evidence and "93.0%" in verdict.evidence


# --- client-bound ---


def test_levels_where_the_load_generator_saturates_are_all_flagged() -> None:
    main = series(names.HOST_PROC_CPU_PCT, lambda t: 97.0 if 120 <= t < 180 else 40.0, pid="11", role="main")
    worker = series(names.HOST_PROC_CPU_PCT, lambda t: 30.0, pid="12", role="worker")
    lag = series(names.CLIENT_LOOP_LAG_MS, lambda t: 45.0 if t >= 180 and t % 20 < 4 else 1.0, pid="11")
    verdicts = client_bound(main + worker + lag, WINDOWS)
    assert [v.level_index for v in verdicts] == [2, 3]
    assert all(v.severity is Severity.CRITICAL for v in verdicts)
    assert "load process 11 used 97 % of a core" in verdicts[0].evidence
    assert "event-loop lag P90" in verdicts[1].evidence and "process 11" in verdicts[1].evidence
    assert client_bound_levels(main + worker + lag, WINDOWS) == frozenset({2, 3})
    assert client_bound_levels(main + worker + lag, WINDOWS, loop_lag_p90_ms=100.0) == frozenset({2})


def test_one_stall_of_the_event_loop_does_not_exclude_a_level() -> None:
    lag = series(names.CLIENT_LOOP_LAG_MS, lambda t: 80.0 if t == 70 else 1.0, pid="11")
    assert client_bound(lag, WINDOWS) == []


def test_a_busy_but_not_saturated_client_is_not_flagged() -> None:
    cpu = series(names.HOST_PROC_CPU_PCT, lambda t: 85.0, pid="11", role="main")
    lag = series(names.CLIENT_LOOP_LAG_MS, lambda t: 3.0, pid="11")
    assert client_bound(cpu + lag, WINDOWS) == []


# --- server CPU-bound ---


def cores(pegged_from: int) -> list[TelemetrySample]:
    """Four cores; from ``pegged_from`` one of them (a different one each second) is at 99 %."""
    out = []
    for core in range(4):
        out += series(
            names.HOST_CPU_BUSY_PCT, lambda t, c=core: 99.0 if t >= pegged_from and t % 4 == c else 20.0, cpu=str(core)
        )
    return out + series(names.HOST_CPU_BUSY_PCT, lambda t: 35.0, cpu="all")


def test_a_pegged_core_with_an_idle_gpu_is_server_cpu_bound() -> None:
    timeline = cores(pegged_from=60) + series(names.GPU_SM_UTIL_PCT, lambda t: 30.0, gpu="0")
    verdict = server_cpu_bound(timeline, WINDOWS)
    assert verdict is not None and verdict.level_index == 1
    assert "busiest CPU core 99 %" in verdict.evidence and "GPU 0 30 %" in verdict.evidence
    skipped = server_cpu_bound(timeline, WINDOWS, exclude_levels={1})
    assert skipped is not None and skipped.level_index == 2


def test_a_pegged_core_with_a_busy_gpu_or_no_gpu_data_is_not_server_cpu_bound() -> None:
    assert server_cpu_bound(cores(0) + series(names.GPU_SM_UTIL_PCT, lambda t: 90.0, gpu="0"), WINDOWS) is None
    assert server_cpu_bound(cores(0), WINDOWS) is None


# --- queueing ---


def waiting(by_level: list[Callable[[int], float]]) -> list[TelemetrySample]:
    return series(names.SERVER_REQUESTS_WAITING, lambda t: by_level[t // 60](t), source="server")


def test_a_persistent_and_growing_queue_marks_queueing_and_the_latency_knee_before_it() -> None:
    timeline = waiting(
        [
            lambda t: 0.0,
            lambda t: 1.0 if t % 10 == 0 else 0.0,  # a blip in 10 % of readings: not queueing
            lambda t: 3.0 if t % 4 else 0.0,
            lambda t: 20.0,
        ]
    )
    verdict = queueing(timeline, WINDOWS)
    assert verdict is not None and (verdict.level_index, verdict.level) == (2, 16)
    assert verdict.severity is Severity.INFO
    assert "16: 2.2, 64: 20.0" in verdict.evidence
    knee = latency_knee_from_queue(timeline, WINDOWS)
    assert knee is not None and (knee.level_index, knee.level) == (1, 4)


def test_a_queue_that_empties_again_is_not_queueing() -> None:
    assert queueing(waiting([lambda t: 0.0, lambda t: 5.0, lambda t: 0.0, lambda t: 0.0]), WINDOWS) is None
    # Non-empty to the end but shrinking: not rising.
    assert queueing(waiting([lambda t: 0.0, lambda t: 9.0, lambda t: 4.0, lambda t: 2.0]), WINDOWS) is None


def test_queueing_from_the_first_level_leaves_no_knee_below_it() -> None:
    timeline = waiting([lambda t: 1.0, lambda t: 2.0, lambda t: 4.0, lambda t: 8.0])
    verdict = queueing(timeline, WINDOWS)
    assert verdict is not None and verdict.level_index == 0
    assert latency_knee_from_queue(timeline, WINDOWS) is None


def test_without_server_queue_readings_there_is_no_queueing_verdict() -> None:
    assert queueing([], WINDOWS) is None
    assert latency_knee_from_queue([], WINDOWS) is None


# --- TTFT gap ---


def test_ttft_gap_is_our_mean_minus_the_servers_histogram_mean_per_level() -> None:
    # Server TTFT: 10 requests per second at 0.1 s each in levels 0-1, 0.4 s in levels 2-3.
    ttft_sum = series(
        names.SERVER_TTFT_SUM, lambda t: sum(1.0 if s < 120 else 4.0 for s in range(t + 1)), source="server"
    )
    ttft_count = series(names.SERVER_TTFT_COUNT, lambda t: 10.0 * (t + 1), source="server")
    gaps = ttft_gap(ttft_sum + ttft_count, WINDOWS, {0: 0.13, 2: 0.45, 3: 0.47})
    assert [g.level_index for g in gaps] == [0, 2, 3]
    assert gaps[0].server_ttft_mean_s == pytest.approx(0.1)
    assert gaps[0].gap_s == pytest.approx(0.03)
    assert gaps[1].server_ttft_mean_s == pytest.approx(0.4)  # its base is the last reading of level 1
    assert gaps[1].server_observations == 600.0
    assert gaps[2].gap_s == pytest.approx(0.07)
    assert ttft_gap([], WINDOWS, {0: 0.1}) == []


def test_client_ttft_means_use_successful_measured_requests_only() -> None:
    def record(level: int, sent_s: float, first_s: float, **kw: object) -> RequestRecord:
        return RequestRecord(
            request_id=f"{level}-{sent_s}",
            level_index=level,
            level=LEVELS[level],
            sent_ns=int(sent_s * S),
            first_token_ns=int(first_s * S),
            **kw,
        )  # type: ignore[arg-type]

    records = [
        record(0, 1.0, 1.1),
        record(0, 2.0, 2.3),
        record(0, 3.0, 9.0, warmup=True),
        record(0, 4.0, 9.0, error=ErrorClass.HTTP_5XX),
        record(1, 5.0, 5.5),
    ]
    means = client_ttft_means(records)
    assert means == {0: pytest.approx(0.2), 1: pytest.approx(0.5)}


# --- together ---


def test_all_verdicts_runs_every_check_and_skips_server_cpu_for_remote_servers() -> None:
    timeline = (
        gpu_timeline(power=lambda t: 690.0 if t >= 130 else 300.0, clock=lambda t: 1700.0 if t >= 135 else 1980.0)
        + series(names.GPU_SM_UTIL_PCT, lambda t: 30.0, gpu="0")
        + cores(pegged_from=0)
        + series(names.HOST_PROC_CPU_PCT, lambda t: 95.0 if t >= 180 else 20.0, pid="1", role="main")
        + waiting([lambda t: 0.0, lambda t: 0.0, lambda t: 2.0, lambda t: 6.0])
    )
    remote = [(v.name, v.level_index) for v in all_verdicts(timeline, WINDOWS)]
    assert remote == [("power_wall", 2), ("client_bound", 3), ("queueing", 2), ("latency_knee_from_queue", 1)]
    local = [(v.name, v.level_index) for v in all_verdicts(timeline, WINDOWS, local_server=True)]
    assert ("server_cpu_bound", 0) in local
