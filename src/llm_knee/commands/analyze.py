"""Analysis of what is on disk: a run directory (re-summarised from its records) or a CSV table."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llm_knee.analysis.findings import Findings, telemetry_findings, to_common_clock
from llm_knee.analysis.recommend import AnalysisSettings, recommend
from llm_knee.analysis.run import summarize_run
from llm_knee.analysis.slo import Objective, parse_slo
from llm_knee.records.schema import RequestRecord
from llm_knee.records.store import RunStore
from llm_knee.records.table_import import read_level_table
from llm_knee.report.result import build_result
from llm_knee.telemetry.summarize import LevelWindow


def settings_from_spec(spec: dict[str, Any], overrides: dict[str, Any] | None = None) -> AnalysisSettings:
    base = dict(spec.get("analysis") or {})
    base.update({k: v for k, v in (overrides or {}).items() if v is not None})
    known = set(AnalysisSettings.__dataclass_fields__)
    return AnalysisSettings(**{k: v for k, v in base.items() if k in known})


def analyze_store(
    store: RunStore,
    *,
    settings: AnalysisSettings | None = None,
    slo: tuple[Objective, ...] | None = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """The result document of a run directory, recomputed from its records."""
    spec = store.read_spec()
    settings = settings or settings_from_spec(spec)
    if slo is None:
        slo = parse_slo(spec["slo"]) if spec.get("slo") else ()
    mode = (spec.get("load") or {}).get("mode", "closed")
    entries = store.levels()
    if not entries:
        raise ValueError(
            f"{store.path} has no finished level yet: nothing to analyse "
            "(run `knee find --resume` on it to measure the levels)"
        )
    records = store.records()
    summaries = summarize_run(records, entries, mode=mode, slo=slo)
    interrupted = {int(e["level_index"]) for e in entries if e.get("status") != "complete"}
    planned = len((spec.get("load") or {}).get("levels", [])) or len(entries)
    partial = bool(interrupted) or len(entries) < planned
    findings = _findings(store, spec, entries, records)
    rec = recommend(summaries, settings, exclude=interrupted | findings.exclude, latency_extra=findings.latency_extra)
    notes = list(notes or [])
    for v in findings.verdicts:
        if v.name == "client_bound":
            notes.append(
                f"level {v.level:g} left out of the knee: the load generator was the bottleneck ({v.evidence})"
            )
    if interrupted:
        notes.append(
            "interrupted level(s) "
            + ", ".join(f"{s.level:g}" for s in summaries if s.level_index in interrupted)
            + " are shown but left out of the knees; `knee find --resume DIR` measures them again"
        )
    if store.skipped_lines:
        notes.append(f"{store.skipped_lines} unreadable line(s) skipped (a write cut short by a crash)")
    unsteady = [s for s in summaries if s.steady is False and s.level_index not in interrupted]
    if unsteady:
        notes.append(
            "throughput was not yet steady when these levels hit their time limit: "
            + ", ".join(f"{s.level:g}" for s in unsteady)
            + " (raise --max-duration for firmer figures)"
        )
    final_drain = next((s.drain_s for s in reversed(summaries) if s.level_index not in interrupted), None)
    spec_for_result = {**spec, "analysis": asdict(settings)}
    return build_result(
        summaries,
        rec,
        spec=spec_for_result,
        partial=partial,
        notes=notes,
        final_drain_s=final_drain,
        telemetry=findings.per_level,
        verdicts=findings.verdicts_json(),
        telemetry_sources=findings.sources,
    )


def _findings(
    store: RunStore, spec: dict[str, Any], entries: list[dict[str, Any]], records: list[RequestRecord]
) -> Findings:
    samples = store.telemetry()
    if not samples:
        return Findings()
    walls = {int(s["session"]): int(s["wall_ns"]) for s in spec.get("sessions", [])}
    first = min(walls.values(), default=0)
    # Sessions are separate processes with their own monotonic anchors; their wall-clock anchors place
    # them on one timeline (used only between sessions, never inside one).
    offsets = {k: v - first for k, v in walls.items()}
    windows = []
    for e in entries:
        off = offsets.get(int(e.get("session", 0)), 0)
        w = e["window"]
        if int(w["end_ns"]) > int(w["start_ns"]):
            windows.append(
                LevelWindow(int(e["level_index"]), float(e["level"]), w["start_ns"] + off, w["end_ns"] + off)
            )
    base_url = str((spec.get("target") or {}).get("base_url", ""))
    host = urlsplit(base_url).hostname or ""
    local = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
    return telemetry_findings(to_common_clock(samples, offsets), windows, records, local_server=local)


def analyze_table(path: Path, settings: AnalysisSettings) -> dict[str, Any]:
    summaries = read_level_table(path)
    rec = recommend(summaries, settings)
    return build_result(summaries, rec, spec={"target": {"table": str(path)}})
