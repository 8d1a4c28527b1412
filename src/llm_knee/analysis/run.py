"""Re-derive every level summary of a run from its records and recorded windows (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llm_knee.analysis.slo import Objective
from llm_knee.analysis.summary import LevelSummary, Window, summarize_level
from llm_knee.records.schema import RequestRecord


def summarize_run(
    records: Sequence[RequestRecord],
    level_entries: Sequence[dict[str, Any]],
    *,
    mode: str,
    slo: Sequence[Objective] = (),
    include_interrupted: bool = True,
) -> list[LevelSummary]:
    """One summary per level entry (``levels.jsonl`` rows), recomputed from the records.

    The driver's own fields (steady, stop reason, drain) are carried over from the entry; everything
    else comes from the records, so a change in the analysis applies to old runs too.
    """
    by_level: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_level.setdefault(r.level_index, []).append(r)
    out: list[LevelSummary] = []
    for entry in level_entries:
        if entry.get("status") != "complete" and not include_interrupted:
            continue
        idx = int(entry["level_index"])
        w = entry["window"]
        window = Window(int(w["start_ns"]), int(w["end_ns"]), int(entry.get("session", 0)))
        summary = summarize_level(
            by_level.get(idx, []),
            level_index=idx,
            level=float(entry["level"]),
            mode=mode,
            window=window,
            slo=slo,
        )
        old = entry.get("summary", {})
        summary.steady = old.get("steady")
        summary.stop_reason = str(old.get("stop_reason", entry.get("status", "")))
        summary.drain_s = old.get("drain_s")
        out.append(summary)
    return out
