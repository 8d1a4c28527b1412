"""A few telemetry figures per level, picked from the full per-level summaries for tables.

The full summaries (every metric, every label, mean/max/P95) stay in result.json; tables show the
figures an operator reads first. Where a metric has several instances (GPUs), the worst is shown.
"""

from __future__ import annotations

from typing import Any

# (column, metric name, statistic, scale, label filter)
COLUMNS: tuple[tuple[str, str, str, float, str], ...] = (
    ("GPU SM %", "gpu.sm_util_pct", "mean", 1.0, ""),
    ("GPU W", "gpu.power_w", "mean", 1.0, ""),
    ("GPU MHz", "gpu.sm_clock_mhz", "mean", 1.0, ""),
    ("GPU mem %", "gpu.memory_used_frac", "max", 100.0, ""),
    ("running", "server.requests_running", "mean", 1.0, ""),
    ("waiting", "server.requests_waiting", "mean", 1.0, ""),
    ("KV %", "server.kv_usage", "max", 100.0, ""),
    ("host CPU %", "host.cpu_busy_pct", "mean", 1.0, "cpu=all"),
    ("client CPU %", "host.proc_cpu_pct", "mean", 1.0, "role=main"),
    ("loop lag P95 ms", "client.loop_lag_ms", "p95", 1.0, ""),
)


def pick(tel: dict[str, Any], name: str, stat: str, label: str = "") -> float | None:
    """The worst (largest) ``stat`` of metric ``name`` over its instances, optionally one label only."""
    values = []
    for key, stats in tel.items():
        base, _, labels = key.partition("{")
        if base != name or (label and label not in labels):
            continue
        if isinstance(stats, dict) and stats.get(stat) is not None:
            values.append(float(stats[stat]))
    return max(values) if values else None


def telemetry_rows(levels: list[dict[str, Any]]) -> tuple[list[str], list[list[float | None]]]:
    """Column names present in any level, and one row of values per level (None where absent)."""
    present = [
        c for c in COLUMNS if any(pick(lv.get("telemetry") or {}, c[1], c[2], c[4]) is not None for lv in levels)
    ]
    gap_present = any("ttft_gap_ms" in (lv.get("telemetry") or {}) for lv in levels)
    names = [c[0] for c in present] + (["TTFT gap ms"] if gap_present else [])
    rows: list[list[float | None]] = []
    for lv in levels:
        tel = lv.get("telemetry") or {}
        row: list[float | None] = []
        for _, name, stat, scale, label in present:
            v = pick(tel, name, stat, label)
            row.append(None if v is None else v * scale)
        if gap_present:
            gap = tel.get("ttft_gap_ms")
            row.append(None if not gap else float(gap["gap"]))
        rows.append(row)
    return names, rows
