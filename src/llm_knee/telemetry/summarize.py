"""Per-level summaries of telemetry samples (pure functions).

A level's window is ``[t0_ns, t1_ns)`` on the session clock. Each metric series (a name plus its
labels, written ``name{k=v,...}``) gets mean, max and P95 of the samples inside the window, and ``n``.
Cumulative series (``*_total``, ``*_sum``, ``*_count``) also get ``delta``: their change from the last
reading before the window (or the first inside it) to the last inside it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry.names import is_cumulative

Series = list[tuple[int, float]]
"""(t_ns, value) pairs in time order."""


@dataclass(frozen=True, slots=True)
class LevelWindow:
    """When one level ran, on the session clock: ``[t0_ns, t1_ns)``."""

    level_index: int
    level: float
    t0_ns: int
    t1_ns: int

    def __post_init__(self) -> None:
        if self.t1_ns <= self.t0_ns:
            raise ValueError(f"level {self.level_index}: window end {self.t1_ns} is not after its start {self.t0_ns}")

    def contains(self, t_ns: int) -> bool:
        return self.t0_ns <= t_ns < self.t1_ns

    @property
    def duration_s(self) -> float:
        return (self.t1_ns - self.t0_ns) / 1e9


def series_key(name: str, labels: Mapping[str, str]) -> str:
    """``name`` or ``name{k=v,...}`` with labels in sorted order."""
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={labels[k]}" for k in sorted(labels)) + "}"


def group_series(
    samples: Iterable[TelemetrySample], name: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], Series]:
    """Samples grouped by (name, sorted labels) into time-ordered series; only ``name`` when given."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], Series] = {}
    for s in samples:
        if name is not None and s.name != name:
            continue
        out.setdefault((s.name, tuple(sorted(s.labels.items()))), []).append((s.t_ns, s.value))
    for series in out.values():
        series.sort(key=lambda p: p[0])
    return out


def in_window(series: Series, t0_ns: int, t1_ns: int) -> Series:
    """The part of a time-ordered series with ``t0_ns <= t < t1_ns``."""
    times = [t for t, _ in series]
    return series[bisect.bisect_left(times, t0_ns) : bisect.bisect_left(times, t1_ns)]


def last_before(series: Series, t_ns: int) -> tuple[int, float] | None:
    """The last point strictly before ``t_ns``."""
    i = bisect.bisect_left([t for t, _ in series], t_ns)
    return series[i - 1] if i > 0 else None


def cumulative_delta(series: Series, t0_ns: int, t1_ns: int) -> float | None:
    """Change of a counter over the window; None without readings or when it went down (a restart)."""
    inside = in_window(series, t0_ns, t1_ns)
    if not inside:
        return None
    base = last_before(series, t0_ns) or inside[0]
    delta = inside[-1][1] - base[1]
    return delta if delta >= 0 else None


def stats(values: Sequence[float]) -> dict[str, float]:
    """mean, max, p95 and n of a non-empty sequence."""
    arr = np.asarray(values, dtype=float)
    return {
        "mean": float(arr.mean()),
        "max": float(arr.max()),
        "p95": float(np.percentile(arr, 95)),
        "n": float(arr.size),
    }


def summarize_window(samples: Iterable[TelemetrySample], t0_ns: int, t1_ns: int) -> dict[str, dict[str, float]]:
    """Summary of every series over ``[t0_ns, t1_ns)``, keyed by :func:`series_key`."""
    return _summarize(group_series(samples), t0_ns, t1_ns)


def _summarize(
    grouped: Mapping[tuple[str, tuple[tuple[str, str], ...]], Series], t0_ns: int, t1_ns: int
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (name, labels), series in sorted(grouped.items()):
        inside = in_window(series, t0_ns, t1_ns)
        if not inside:
            continue
        summary = stats([v for _, v in inside])
        if is_cumulative(name):
            delta = cumulative_delta(series, t0_ns, t1_ns)
            if delta is not None:
                summary["delta"] = delta
        out[series_key(name, dict(labels))] = summary
    return out


def summarize_levels(
    samples: Iterable[TelemetrySample], windows: Iterable[LevelWindow]
) -> dict[int, dict[str, dict[str, float]]]:
    """:func:`summarize_window` for each level, by ``level_index``."""
    grouped = group_series(samples)
    return {w.level_index: _summarize(grouped, w.t0_ns, w.t1_ns) for w in windows}


def histogram_mean(sums: Series, counts: Series, t0_ns: int, t1_ns: int) -> tuple[float, float] | None:
    """(mean, observations) of a Prometheus histogram over a window: delta(sum) / delta(count)."""
    d_sum = cumulative_delta(sums, t0_ns, t1_ns)
    d_count = cumulative_delta(counts, t0_ns, t1_ns)
    if d_sum is None or d_count is None or d_count <= 0:
        return None
    return d_sum / d_count, d_count
