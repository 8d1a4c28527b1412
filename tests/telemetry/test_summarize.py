"""Per-level summaries: mean, max and P95 of each series inside [t0, t1); counters by their change."""

from __future__ import annotations

import pytest

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry.summarize import (
    LevelWindow,
    cumulative_delta,
    histogram_mean,
    series_key,
    summarize_levels,
    summarize_window,
)

S = 1_000_000_000


def sample(t_s: float, name: str, value: float, **labels: str) -> TelemetrySample:
    return TelemetrySample(int(t_s * S), "test", name, value, labels)


def test_each_series_is_summarised_inside_the_half_open_window() -> None:
    samples = [sample(t, "gpu.power_w", float(t), gpu="0") for t in range(0, 30)]
    samples += [sample(t, "gpu.power_w", 100.0, gpu="1") for t in range(10, 20)]
    summary = summarize_window(samples, 10 * S, 20 * S)
    assert set(summary) == {"gpu.power_w{gpu=0}", "gpu.power_w{gpu=1}"}
    g0 = summary["gpu.power_w{gpu=0}"]
    assert g0 == {"mean": 14.5, "max": 19.0, "p95": pytest.approx(18.55), "n": 10.0}
    assert summary["gpu.power_w{gpu=1}"]["p95"] == 100.0


def test_counters_get_their_change_from_the_last_reading_before_the_level() -> None:
    samples = [sample(t, "server.preemptions_total", v) for t, v in [(5, 2), (9, 3), (12, 7), (18, 10), (25, 11)]]
    summary = summarize_window(samples, 10 * S, 20 * S)
    assert summary["server.preemptions_total"]["delta"] == 7.0  # 10 - 3
    # Without an earlier reading the first inside the window is the base.
    assert summarize_window(samples[2:], 10 * S, 20 * S)["server.preemptions_total"]["delta"] == 3.0
    # A server restart resets counters: no delta is better than a negative one.
    reset = [sample(9, "server.preemptions_total", 50), sample(12, "server.preemptions_total", 1)]
    assert "delta" not in summarize_window(reset, 10 * S, 20 * S)["server.preemptions_total"]
    assert "delta" not in summarize_window([sample(12, "gpu.power_w", 1)], 10 * S, 20 * S)["gpu.power_w"]


def test_histogram_mean_is_delta_sum_over_delta_count() -> None:
    sums = [(5 * S, 1.0), (15 * S, 4.0), (19 * S, 7.0)]
    counts = [(5 * S, 10.0), (15 * S, 25.0), (19 * S, 40.0)]
    assert histogram_mean(sums, counts, 10 * S, 20 * S) == (pytest.approx(0.2), 30.0)
    assert histogram_mean(sums, counts, 30 * S, 40 * S) is None
    flat = [(5 * S, 10.0), (15 * S, 10.0)]
    assert histogram_mean(sums, flat, 10 * S, 20 * S) is None
    assert cumulative_delta(sums, 10 * S, 20 * S) == 6.0


def test_levels_are_summarised_by_index_and_empty_levels_stay_empty() -> None:
    samples = [sample(t, "host.cpu_busy_pct", 10.0 * (t // 10), cpu="all") for t in range(30)]
    windows = [LevelWindow(0, 1, 0, 10 * S), LevelWindow(1, 2, 10 * S, 20 * S), LevelWindow(2, 4, 40 * S, 50 * S)]
    summary = summarize_levels(samples, windows)
    assert summary[0]["host.cpu_busy_pct{cpu=all}"]["mean"] == 0.0
    assert summary[1]["host.cpu_busy_pct{cpu=all}"]["mean"] == 10.0
    assert summary[2] == {}


def test_series_keys_sort_labels() -> None:
    assert series_key("a", {}) == "a"
    assert series_key("a", {"role": "main", "pid": "7"}) == "a{pid=7,role=main}"


def test_a_window_must_end_after_it_starts() -> None:
    with pytest.raises(ValueError, match="level 3: window end 5 is not after its start 5"):
        LevelWindow(3, 8, 5, 5)
    assert LevelWindow(0, 1, 0, 2 * S).duration_s == 2.0
