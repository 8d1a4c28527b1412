"""The result document: one versioned JSON object that every other output is rendered from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llm_knee import __version__
from llm_knee.analysis.recommend import Recommendation
from llm_knee.analysis.summary import LevelSummary

RESULT_SCHEMA = "llm-knee/result"
RESULT_SCHEMA_VERSION = 1


def build_result(
    summaries: Sequence[LevelSummary],
    rec: Recommendation,
    *,
    spec: dict[str, Any] | None = None,
    partial: bool = False,
    notes: Sequence[str] = (),
    final_drain_s: float | None = None,
    telemetry: dict[int, dict[str, Any]] | None = None,
    verdicts: Sequence[dict[str, Any]] = (),
    telemetry_sources: Sequence[str] = (),
) -> dict[str, Any]:
    spec = spec or {}
    levels = []
    for s in summaries:
        d = s.to_dict()
        if telemetry and s.level_index in telemetry:
            d["telemetry"] = telemetry[s.level_index]
        levels.append(d)
    return {
        "schema": RESULT_SCHEMA,
        "schema_version": RESULT_SCHEMA_VERSION,
        "tool_version": __version__,
        "partial": partial,
        "mode": rec.mode,
        "target": spec.get("target"),
        "workload": spec.get("workload"),
        "load": spec.get("load"),
        "slo": spec.get("slo"),
        "levels": levels,
        "analysis": rec.to_dict(),
        "verdicts": list(verdicts),
        "telemetry_sources": list(telemetry_sources),
        "final_drain_s": final_drain_s,
        "notes": list(notes),
    }


def analysis_json(result: dict[str, Any]) -> dict[str, Any]:
    """The compact object `knee analyze --json` and `knee find --json` print."""
    a = dict(result["analysis"])
    a["alarms"] = [{"name": al["name"], "level": al["level"], "message": al["message"]} for al in a["alarms"]]
    a["levels"] = [
        {k: lv.get(k) for k in ("level", "output_tok_s", "ttft_p99_ms", "error_rate")} for lv in result["levels"]
    ]
    a["partial"] = result.get("partial", False)
    return a
