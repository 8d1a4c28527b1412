"""Knee detection: several independent methods per curve, combined into one answer with a confidence.

No single knee method is trustworthy on a handful of noisy points (Kneedle moves with the sweep range
and axis scaling; thresholds depend on the ladder's spacing), so each curve is judged by at least three
methods that fail differently, and the answer is their lower median. Confidence is the share of methods
that agree with it within one ladder step, so disagreement is visible instead of hidden.

Throughput curve X(level):
- ``kneedle``: Kneedle (``kneed``) on the concave, increasing part of the curve (cut at the peak when
  the curve falls afterwards by more than ``decline_tol``).
- ``asymptotic``: the asymptotic-bound crossing N* = X_max / X(1) (Little's law with no think time:
  below N* one more user adds a whole user's worth of work, above it only queueing), with X(1) taken
  as X(first level) / first level when the ladder does not start at 1; snapped to the nearest level.
- ``marginal``: the first level from which no higher level adds ``min_gain`` throughput per doubling
  of the level (scaled by the step's size so that a linear curve never triggers it).
- ``segmented``: a two-segment (hinge) least-squares fit; a knee when the second slope is below
  ``slope_ratio`` of the first.
Latency curve L(level) (P99 TTFT by default):
- ``kneedle``: Kneedle on the convex, increasing curve.
- ``growth``: the last level before L exceeds ``factor`` × L(first level) *and* rose by at least
  ``min_rise_ms`` (so that a 2 ms → 7 ms wobble on loopback is not a knee).
- ``segmented``: a hinge fit; a knee when the second slope is ``slope_ratio`` times the first or more.
Further methods (e.g. server-side queueing from telemetry) can be passed in as ``extra`` answers.

A method that finds no knee inside the tested range answers ``None``; a knee at the last level tested is
not evidence of a knee (the curve may go on rising), so methods answer ``None`` there too.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MethodAnswer:
    method: str
    index: int | None  # index into the levels; None = no knee inside the tested range
    level: float | None
    note: str = ""


@dataclass(frozen=True)
class KneeResult:
    kind: str  # "throughput" or "latency"
    index: int | None
    level: float | None
    reached: bool  # False: no knee inside the tested range (extend the ladder)
    confidence: float  # 0..1
    confidence_label: str  # high / medium / low
    methods: tuple[MethodAnswer, ...]
    undetermined: bool = False  # methods found knees but did not agree on one

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "level": self.level,
            "index": self.index,
            "reached": self.reached,
            "undetermined": self.undetermined,
            "confidence": round(self.confidence, 3),
            "confidence_label": self.confidence_label,
            "methods": [{"method": m.method, "level": m.level, "index": m.index, "note": m.note} for m in self.methods],
        }


def _validate(levels: Sequence[float], values: Sequence[float], what: str) -> tuple[np.ndarray, np.ndarray]:
    if len(levels) != len(values):
        raise ValueError(f"{what}: {len(levels)} levels but {len(values)} values")
    x = np.asarray(levels, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        raise ValueError(f"{what}: need at least 2 levels to look for a knee, got {len(x)}")
    if not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise ValueError(f"{what}: levels and values must be finite numbers")
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"{what}: levels must be strictly increasing, got {list(levels)}")
    if np.any(x <= 0):
        raise ValueError(f"{what}: levels must be positive, got {list(levels)}")
    return x, y


def _answer(method: str, x: np.ndarray, index: int | None, note: str = "") -> MethodAnswer:
    if index is not None and index >= len(x) - 1:
        return MethodAnswer(method, None, None, note or "at the top of the tested range: not a knee yet")
    return MethodAnswer(method, index, None if index is None else float(x[index]), note)


def _kneedle(x: np.ndarray, y: np.ndarray, curve: str) -> int | None:
    from kneed import KneeLocator

    if len(x) < 3 or float(np.ptp(y)) == 0.0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = KneeLocator(x, y, S=1.0, curve=curve, direction="increasing").knee
    if found is None or (isinstance(found, float) and math.isnan(found)):
        return None
    return int(np.argmin(np.abs(x - float(found))))


def _hinge_fit(x: np.ndarray, y: np.ndarray) -> tuple[int, float, float] | None:
    """Best continuous two-segment fit with the hinge on a level: (hinge index, slope before, after)."""
    n = len(x)
    if n < 4:
        return None
    best: tuple[float, int, float, float] | None = None
    for b in range(1, n - 1):
        d = x - x[b]
        design = np.column_stack([np.ones(n), np.minimum(d, 0.0), np.maximum(d, 0.0)])
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        sse = float(np.sum((design @ coef - y) ** 2))
        if best is None or sse < best[0] - 1e-12 * max(1.0, abs(sse)):
            best = (sse, b, float(coef[1]), float(coef[2]))
    assert best is not None
    return best[1], best[2], best[3]


def throughput_knee(
    levels: Sequence[float],
    throughput: Sequence[float],
    *,
    min_gain: float = 0.15,
    slope_ratio: float = 0.5,
    decline_tol: float = 0.05,
) -> KneeResult:
    x, y = _validate(levels, throughput, "throughput knee")
    if not 0 < min_gain < 0.69:
        # At 0.69 per doubling (ln 2) even a perfectly linear curve would fail a small step.
        raise ValueError(f"min_gain must be within (0, 0.69) per doubling, got {min_gain}")
    answers: list[MethodAnswer] = []

    peak = int(np.argmax(y))
    declines = peak < len(y) - 1 and float(np.min(y[peak + 1 :])) < (1 - decline_tol) * float(y[peak])
    cut = peak + 1 if declines else len(y)
    k = _kneedle(x[:cut], y[:cut], "concave")
    if k is None and declines:
        answers.append(_answer("kneedle", x, peak, "rising part is linear; throughput falls after its peak"))
    else:
        answers.append(_answer("kneedle", x, k))

    x1 = float(y[0] / x[0])  # throughput of one unit of load, extrapolated linearly from the first level
    if x1 <= 0:
        answers.append(MethodAnswer("asymptotic", None, None, "no throughput at the first level"))
    else:
        with np.errstate(over="ignore"):
            n_star = float(np.max(y)) / x1
        if not math.isfinite(n_star) or n_star > x[-1]:
            answers.append(
                MethodAnswer("asymptotic", None, None, f"N* = X_max / X(1) = {n_star:.3g}: beyond the range")
            )
        else:
            idx = int(np.argmin(np.abs(np.log(x / n_star))))
            answers.append(_answer("asymptotic", x, idx, f"N* = X_max / X(1) = {n_star:.3g}"))

    marginal: int | None = None
    for i in range(len(x) - 1):
        if y[i] <= 0:
            continue
        # No higher level pays: each adds less than min_gain per doubling over this one. Looking at all
        # higher levels, not just the next, keeps one noisy step from ending the climb early.
        with np.errstate(over="ignore", invalid="ignore"):
            worth = [y[j] >= y[i] * (1 + min_gain * math.log2(x[j] / x[i])) for j in range(i + 1, len(x))]
        if not any(worth):
            marginal = i
            break
    answers.append(_answer("marginal", x, marginal, f"higher levels add < {min_gain:.0%} per doubling"))

    fit = _hinge_fit(x, y)
    if fit is None:
        answers.append(MethodAnswer("segmented", None, None, "needs at least 4 levels"))
    else:
        b, s1, s2 = fit
        is_knee = s1 > 0 and s2 < slope_ratio * s1
        answers.append(_answer("segmented", x, b if is_knee else None, f"slopes {s1:.3g} then {s2:.3g}"))
    return combine("throughput", x, answers)


def latency_knee(
    levels: Sequence[float],
    latency_ms: Sequence[float],
    *,
    factor: float = 3.0,
    min_rise_ms: float = 50.0,
    slope_ratio: float = 3.0,
    extra: Sequence[MethodAnswer] = (),
) -> KneeResult:
    x, y = _validate(levels, latency_ms, "latency knee")
    if factor <= 1:
        raise ValueError(f"latency growth factor must be above 1, got {factor}")
    answers: list[MethodAnswer] = [_answer("kneedle", x, _kneedle(x, y, "convex"))]

    base = float(y[0])
    growth: int | None = None
    for i in range(1, len(y)):
        if y[i] > factor * base and y[i] - base >= min_rise_ms:
            growth = i - 1
            break
    answers.append(
        _answer("growth", x, growth, f"> {factor:g}x the first level and +{min_rise_ms:g} ms")
        if growth is not None
        else MethodAnswer("growth", None, None, f"never above {factor:g}x the first level")
    )

    fit = _hinge_fit(x, y)
    if fit is None:
        answers.append(MethodAnswer("segmented", None, None, "needs at least 4 levels"))
    else:
        b, s1, s2 = fit
        rise = float(y[-1] - y[b])
        is_knee = s2 > 0 and s2 >= slope_ratio * max(s1, 0.0) and rise >= min_rise_ms
        note = f"slopes {s1:.3g} then {s2:.3g} ms per unit of load"
        answers.append(_answer("segmented", x, b if is_knee else None, note))
    answers.extend(extra)
    return combine("latency", x, answers)


def combine(kind: str, levels: Sequence[float] | np.ndarray, answers: Sequence[MethodAnswer]) -> KneeResult:
    """One answer from several methods, by agreement.

    The methods that found a knee are grouped around each candidate level (a group = the answers within
    one ladder step of it); the best-supported group wins (ties: the lower level). Its answer is the lower
    median of its members — when at least two methods are in it and it is at least as large as the group
    of methods that found no knee. When more methods found no knee, the knee is "not reached". When the
    methods that found one all disagree, the knee is *undetermined*: no number is better than a guess.

    Confidence = size of the winning group over the number of methods, halved with fewer than four levels.
    """
    if not answers:
        raise ValueError("no knee methods to combine")
    x = np.asarray(levels, dtype=np.float64)
    found = sorted(a.index for a in answers if a.index is not None)
    none_count = len(answers) - len(found)
    best: list[int] = []
    for centre in sorted(set(found)):
        group = [i for i in found if abs(i - centre) <= 1]
        if len(group) > len(best):
            best = group
    index: int | None = None
    undetermined = False
    if best and len(best) >= 2 and len(best) >= none_count:
        index = best[(len(best) - 1) // 2]
        agree = len(best)
    elif none_count >= max(len(best), 1):
        agree = none_count
    else:
        undetermined = True
        agree = 0
    confidence = agree / len(answers)
    if len(x) < 4:
        confidence /= 2
    label = "high" if confidence >= 0.75 else "medium" if confidence >= 0.5 else "low"
    return KneeResult(
        kind=kind,
        index=index,
        level=None if index is None else float(x[index]),
        reached=index is not None,
        confidence=confidence,
        confidence_label=label,
        methods=tuple(answers),
        undetermined=undetermined,
    )
