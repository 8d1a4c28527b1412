"""From level summaries to what an operator needs: the knees, the recommended maximum load, the safe
watermark, and the alarms practitioners use (domain.md §4), each with the first level where it fires.

The recommendation is the smaller of the throughput and latency knees, then lowered to the largest level
below it at which every level so far stayed within the error budget (and met the SLOs, when given) and
was not excluded (e.g. as client-bound). When no knee was reached, the top level tested is offered as a
*lower bound* and said to be one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_knee.analysis.knee import KneeResult, MethodAnswer, latency_knee, throughput_knee
from llm_knee.analysis.summary import LevelSummary


@dataclass(frozen=True)
class AnalysisSettings:
    error_budget: float = 0.0  # highest acceptable error rate (fraction) at a recommended level
    watermark: float = 0.65  # safe operating fraction of the recommendation (allowed 0.6–0.7)
    min_gain: float = 0.15  # marginal-gain method: throughput added per doubling of load
    latency_metric: str = "ttft_p99_ms"
    latency_factor: float = 3.0
    min_rise_ms: float = 50.0
    ttft_target_ms: float = 500.0  # practitioners' alert threshold for TTFT P99
    ttft_stop_ms: float = 1000.0  # "stop admitting" threshold for TTFT P99
    min_user_tok_s: float = 30.0  # per-user decode speed below which chat feels slow
    tail_ratio: float = 3.0  # P99 > tail_ratio × P50 is the danger zone

    def __post_init__(self) -> None:
        if not 0.6 <= self.watermark <= 0.7:
            raise ValueError(f"watermark must be within 0.6–0.7 (domain practice), got {self.watermark}")
        if not 0.0 <= self.error_budget < 1.0:
            raise ValueError(f"error budget must be a fraction within [0, 1), got {self.error_budget}")


@dataclass(frozen=True)
class Alarm:
    name: str
    level_index: int
    level: float
    value: float
    threshold: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Recommendation:
    throughput_knee: KneeResult | None
    latency_knee: KneeResult | None
    recommended: float | None
    safe: float | None
    lower_bound: bool  # True when no knee was reached: the real limit is higher
    confidence: float
    confidence_label: str
    mode: str
    sentence: str
    limits: list[str] = field(default_factory=list)  # what capped the recommendation, in words
    alarms: tuple[Alarm, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "throughput_knee": None if self.throughput_knee is None else self.throughput_knee.level,
            "latency_knee": None if self.latency_knee is None else self.latency_knee.level,
            "recommended_concurrency": self.recommended if self.mode == "closed" else None,
            "safe_concurrency": self.safe if self.mode == "closed" else None,
            "recommended_rate": self.recommended if self.mode == "open" else None,
            "safe_rate": self.safe if self.mode == "open" else None,
            "lower_bound": self.lower_bound,
            "confidence": round(self.confidence, 3),
            "confidence_label": self.confidence_label,
            "sentence": self.sentence,
            "limits": list(self.limits),
            "knees": {
                "throughput": None if self.throughput_knee is None else self.throughput_knee.to_dict(),
                "latency": None if self.latency_knee is None else self.latency_knee.to_dict(),
            },
            "alarms": [a.to_dict() for a in self.alarms],
        }


def find_alarms(levels: Sequence[LevelSummary], s: AnalysisSettings) -> tuple[Alarm, ...]:
    """Each alarm once, at the first level where the data supports it."""
    alarms: dict[str, Alarm] = {}

    def fire(name: str, lv: LevelSummary, value: float | None, threshold: float, msg: str) -> None:
        if name not in alarms and value is not None:
            alarms[name] = Alarm(name, lv.level_index, lv.level, value, threshold, msg)

    for lv in levels:
        for metric, p50, p99 in (
            ("ttft", lv.ttft_p50_ms, lv.ttft_p99_ms),
            ("e2e", lv.e2e_p50_ms, lv.e2e_p99_ms),
        ):
            if p50 and p99 is not None and p99 > s.tail_ratio * p50:
                fire(
                    f"{metric}_tail",
                    lv,
                    p99 / p50,
                    s.tail_ratio,
                    f"{metric.upper()} P99 is {p99 / p50:.1f}x its P50 (danger zone above {s.tail_ratio:g}x)",
                )
        if lv.ttft_p99_ms is not None and lv.ttft_p99_ms > s.ttft_target_ms:
            fire(
                "ttft_p99_over_target",
                lv,
                lv.ttft_p99_ms,
                s.ttft_target_ms,
                f"TTFT P99 {lv.ttft_p99_ms:.0f} ms is over the {s.ttft_target_ms:g} ms target",
            )
        if lv.ttft_p99_ms is not None and lv.ttft_p99_ms > s.ttft_stop_ms:
            fire(
                "ttft_p99_stop_admitting",
                lv,
                lv.ttft_p99_ms,
                s.ttft_stop_ms,
                f"TTFT P99 {lv.ttft_p99_ms:.0f} ms is over {s.ttft_stop_ms:g} ms: stop admitting",
            )
        speed = lv.decode_tok_s_per_user_p50
        if speed is not None and speed < s.min_user_tok_s:
            fire(
                "per_user_decode_slow",
                lv,
                speed,
                s.min_user_tok_s,
                f"median user decodes at {speed:.1f} tok/s, under {s.min_user_tok_s:g} tok/s",
            )
        if lv.error_rate > 0:
            worst = max(lv.errors.items(), key=lambda kv: kv[1])[0] if lv.errors else "?"
            fire("errors", lv, lv.error_rate, 0.0, f"{lv.error_rate:.1%} of requests failed (mostly {worst})")
        if lv.slo_met is False:
            fire(
                "slo_missed",
                lv,
                1.0,
                0.0,
                "the level misses the SLO: "
                + ", ".join(f"{k} = {'never' if v is None else f'{v:.0f} ms'}" for k, v in lv.slo_detail.items()),
            )
    return tuple(sorted(alarms.values(), key=lambda a: (a.level_index, a.name)))


def _fmt(level: float, mode: str) -> str:
    if mode == "closed":
        return f"{level:g}"
    return f"{level:g} req/s"


def recommend(
    levels: Sequence[LevelSummary],
    settings: AnalysisSettings | None = None,
    *,
    exclude: Collection[int] = (),
    latency_extra: Sequence[MethodAnswer] = (),
) -> Recommendation:
    """Knees, recommendation, watermark and alarms from level summaries (ordered by level).

    ``exclude``: level indices whose figures must not be trusted (e.g. the load generator was the
    bottleneck); they are left out of the knee fits and may not be recommended.
    """
    s = settings or AnalysisSettings()
    if not levels:
        raise ValueError("no levels to analyse: the run has no completed level")
    ordered = sorted(levels, key=lambda lv: lv.level)
    mode = ordered[0].mode
    alarms = find_alarms(ordered, s)
    usable = [lv for lv in ordered if lv.level_index not in exclude and lv.ok > 0]
    limits: list[str] = []

    tk: KneeResult | None = None
    lk: KneeResult | None = None
    if len(usable) >= 2:
        xs = [lv.level for lv in usable]
        tk = throughput_knee(xs, [lv.output_tok_s for lv in usable], min_gain=s.min_gain)
        lat = [getattr(lv, s.latency_metric) for lv in usable]
        if all(v is not None for v in lat):
            # Extra answers name a level; place them on this fit's own (usable) levels.
            extra = [
                MethodAnswer(a.method, xs.index(a.level), a.level, a.note)
                if a.level in xs
                else MethodAnswer(a.method, None, None, a.note)
                for a in latency_extra
            ]
            lk = latency_knee(xs, lat, factor=s.latency_factor, min_rise_ms=s.min_rise_ms, extra=extra)
    else:
        limits.append("fewer than two usable levels: no knee can be judged")

    reached = [k.level for k in (tk, lk) if k is not None and k.reached and k.level is not None]
    lower_bound = not reached
    candidate = min(reached) if reached else (usable[-1].level if usable else None)

    # Levels allowed: from the bottom up until the first level that breaks the error budget or the SLO.
    allowed: list[LevelSummary] = []
    for lv in ordered:
        if lv.error_rate > s.error_budget:
            limits.append(
                f"errors {lv.error_rate:.1%} at {_fmt(lv.level, mode)} exceed the budget of {s.error_budget:.1%}"
            )
            break
        if lv.slo_met is False:
            limits.append(f"SLO missed from {_fmt(lv.level, mode)}")
            break
        if lv.level_index in exclude:
            continue
        allowed.append(lv)
    recommended: float | None = None
    if candidate is not None:
        below = [lv.level for lv in allowed if lv.level <= candidate]
        recommended = max(below) if below else None
        if recommended is not None and recommended < candidate:
            lower_bound = False  # capped by errors/SLO: the knee is not the binding limit any more
    safe: float | None = None
    if recommended is not None:
        safe = max(1.0, math.floor(recommended * s.watermark)) if mode == "closed" else recommended * s.watermark

    knees = [k for k in (tk, lk) if k is not None]
    confidence = min((k.confidence for k in knees), default=0.0)
    label = "high" if confidence >= 0.75 else "medium" if confidence >= 0.5 else "low"
    sentence = _sentence(mode, recommended, safe, lower_bound, tk, lk, limits, label, s.watermark)
    return Recommendation(tk, lk, recommended, safe, lower_bound, confidence, label, mode, sentence, limits, alarms)


def _sentence(
    mode: str,
    rec: float | None,
    safe: float | None,
    lower_bound: bool,
    tk: KneeResult | None,
    lk: KneeResult | None,
    limits: list[str],
    label: str,
    watermark: float,
) -> str:
    unit = "concurrent requests" if mode == "closed" else "req/s"
    if rec is None or safe is None:
        why = "; ".join(limits) if limits else "no level completed successfully"
        return f"No safe load found: {why}. Lower the load or fix the errors, then run again."

    def knee_words(k: KneeResult | None, name: str) -> str:
        if k is None:
            return f"{name} knee not measured"
        if k.undetermined:
            return f"{name} knee undetermined (its methods disagree)"
        if not k.reached:
            return f"no {name} knee within the tested range"
        return f"{name} knee at {k.level:g}"

    head = (
        f"Run at most {rec:g} {unit} per replica"
        if not lower_bound
        else f"The server held up to {rec:g} {unit}, the top of the tested range: its limit is higher — "
        f"extend --levels to find it; until then run at most {rec:g}"
    )
    why = f" ({knee_words(tk, 'throughput')}, {knee_words(lk, 'latency')}"
    why += f"; {'; '.join(limits)})" if limits else ")"
    return f"{head}{why}; keep production at {safe:g} {unit} ({watermark:.0%} watermark). Confidence: {label}."
