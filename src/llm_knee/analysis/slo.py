"""Service-level objectives given by the user (``--slo ttft_p99=500ms,tpot_p50=50ms``).

Each objective is a metric, a percentile and a limit. A request *meets* the objectives when each of its
own values is within the limits (that is what goodput counts); a level *meets* them when each named
percentile over the level's requests is within its limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# metric name -> what it measures, per request, in milliseconds
SLO_METRICS: dict[str, str] = {
    "ttft": "time to first token",
    "tpot": "mean time per output token after the first",
    "e2e": "end-to-end latency",
    "itl": "inter-token latency (per request: its worst gap)",
}
_UNITS_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001}
_TERM = re.compile(r"^(?P<metric>[a-z]+)_p(?P<pct>\d{1,2}(?:\.\d+)?)=(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s|us)?$")


@dataclass(frozen=True)
class Objective:
    metric: str  # one of SLO_METRICS
    percentile: float  # 50, 90, 99 ...
    limit_ms: float

    def __str__(self) -> str:
        pct = f"{self.percentile:g}"
        return f"{self.metric}_p{pct}={self.limit_ms:g}ms"


def parse_slo(text: str) -> tuple[Objective, ...]:
    """Parse ``"ttft_p99=500ms,tpot_p50=50ms"``. Units: ms (default), s, us."""
    objectives: list[Objective] = []
    for raw in text.split(","):
        term = raw.strip().lower()
        if not term:
            continue
        m = _TERM.match(term)
        if m is None:
            raise ValueError(
                f"cannot read SLO term {raw.strip()!r}: expected METRIC_pNN=VALUE[ms|s|us], "
                f"e.g. ttft_p99=500ms,tpot_p50=50ms (metrics: {', '.join(SLO_METRICS)})"
            )
        metric = m["metric"]
        if metric not in SLO_METRICS:
            known = ", ".join(SLO_METRICS)
            raise ValueError(f"unknown SLO metric {metric!r} in {raw.strip()!r}; known: {known}")
        pct = float(m["pct"])
        if not 0 < pct < 100:
            raise ValueError(f"SLO percentile must be between 0 and 100 (exclusive), got {pct:g} in {raw!r}")
        limit = float(m["num"]) * _UNITS_MS[m["unit"] or "ms"]
        if limit <= 0:
            raise ValueError(f"SLO limit must be positive, got {raw.strip()!r}")
        objectives.append(Objective(metric, pct, limit))
    if not objectives:
        raise ValueError("empty SLO: give at least one term, e.g. --slo ttft_p99=500ms")
    return tuple(objectives)
