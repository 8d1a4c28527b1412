"""Telemetry joined to the levels: per-level telemetry summaries, verdicts, levels to exclude from the
knee (client-bound) and the server-queue evidence for the latency knee. Pure: samples and windows in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_knee.analysis.knee import MethodAnswer
from llm_knee.analysis.verdicts import (
    Verdict,
    all_verdicts,
    client_ttft_means,
    ttft_gap,
)
from llm_knee.records.schema import RequestRecord, TelemetrySample
from llm_knee.telemetry.summarize import LevelWindow, summarize_levels


@dataclass
class Findings:
    per_level: dict[int, dict[str, Any]] = field(default_factory=dict)  # level index -> telemetry summary
    verdicts: list[Verdict] = field(default_factory=list)
    exclude: frozenset[int] = frozenset()  # client-bound levels: their numbers describe the client
    latency_extra: tuple[MethodAnswer, ...] = ()
    sources: list[str] = field(default_factory=list)

    def verdicts_json(self) -> list[dict[str, Any]]:
        return [
            {"name": v.name, "level": v.level, "level_index": v.level_index, "severity": str(v.severity),
             "evidence": v.evidence}
            for v in self.verdicts
        ]  # fmt: skip


def to_common_clock(samples: Sequence[TelemetrySample], offsets: dict[int, int]) -> list[TelemetrySample]:
    """Samples of several sessions on one timeline: each session's times shifted by its offset."""
    if not any(offsets.values()):
        return list(samples)
    return [
        TelemetrySample(s.t_ns + offsets.get(s.session, 0), s.source, s.name, s.value, s.labels, s.session)
        for s in samples
    ]


def telemetry_findings(
    samples: Sequence[TelemetrySample],
    windows: Sequence[LevelWindow],
    records: Sequence[RequestRecord],
    *,
    local_server: bool,
) -> Findings:
    """``samples`` and ``windows`` must share one clock (see ``to_common_clock``)."""
    windows = [w for w in windows if w.t1_ns > w.t0_ns]
    if not samples or not windows:
        return Findings()
    per_level: dict[int, dict[str, Any]] = {k: dict(v) for k, v in summarize_levels(samples, windows).items()}
    means = client_ttft_means(r for r in records if not r.warmup)
    for gap in ttft_gap(samples, windows, means):
        per_level.setdefault(gap.level_index, {})["ttft_gap_ms"] = {
            "client_mean": gap.client_ttft_mean_s * 1e3,
            "server_mean": gap.server_ttft_mean_s * 1e3,
            "gap": gap.gap_s * 1e3,
        }
    verdicts = all_verdicts(samples, windows, local_server=local_server)
    exclude = frozenset(v.level_index for v in verdicts if v.name == "client_bound")
    extra = tuple(
        MethodAnswer("queueing", None, v.level, v.evidence) for v in verdicts if v.name == "latency_knee_from_queue"
    )
    return Findings(per_level, verdicts, exclude, extra, sorted({s.source for s in samples}))
