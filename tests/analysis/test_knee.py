"""Knee detection: each method, their combination, and invariants that must hold for any curve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_knee.analysis.knee import MethodAnswer, combine, latency_knee, throughput_knee

LADDER = [1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64]


def saturating(levels: list[float], cap: float, per_user: float = 100.0) -> list[float]:
    return [per_user * min(x, cap) for x in levels]


def methods(result) -> dict[str, float | None]:  # type: ignore[no-untyped-def]
    return {m.method: m.level for m in result.methods}


def test_hard_saturation_at_eight_is_found_by_every_method() -> None:
    k = throughput_knee(LADDER, saturating(LADDER, 8))
    assert k.level == 8 and k.reached
    assert methods(k) == {"kneedle": 8, "asymptotic": 8, "marginal": 8, "segmented": 8}
    assert k.confidence == 1.0 and k.confidence_label == "high"


def test_linear_curve_has_no_knee_inside_the_range() -> None:
    k = throughput_knee(LADDER, [37.0 * x for x in LADDER])
    assert not k.reached and k.level is None
    assert all(v is None for v in methods(k).values())


def test_peak_then_decline_puts_the_knee_at_or_before_the_peak() -> None:
    # The 20M-parameter llama.cpp model of real-engine.md: peaks early, then declines.
    levels = [1, 2, 4, 8, 16, 32]
    k = throughput_knee(levels, [120, 200, 260, 240, 210, 180])
    assert k.reached and k.level is not None and k.level <= 4


def test_gradual_saturation_from_a_real_cpu_engine() -> None:
    levels = [1, 2, 4, 8, 16, 32]
    k = throughput_knee(levels, [174, 221, 259, 259, 295, 275])
    assert k.level == 4
    assert methods(k)["asymptotic"] == 2  # N* = 295 / 174 = 1.7


def test_noisy_saturation_still_lands_within_one_step() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        noisy = [v * (1 + rng.normal(0, 0.03)) for v in saturating(LADDER, 16)]
        k = throughput_knee(LADDER, noisy)
        assert k.level in (12, 16, 20), (noisy, k)


def test_multi_slope_curve_reports_the_first_flattening() -> None:
    # Climbs, flattens (KV limit), climbs a little again (e.g. preemption settling), then flat.
    levels = [1, 2, 4, 8, 16, 24, 32, 48, 64]
    y = [100, 200, 400, 780, 820, 830, 1000, 1010, 1005]
    k = throughput_knee(levels, y)
    assert k.reached and k.level is not None and k.level <= 8


def test_methods_that_disagree_lower_the_confidence() -> None:
    answers = [
        MethodAnswer("a", 2, 4.0),
        MethodAnswer("b", 6, 16.0),
        MethodAnswer("c", None, None),
        MethodAnswer("d", 3, 8.0),
    ]
    k = combine("throughput", [1, 2, 4, 8, 12, 16, 20, 24], answers)
    assert k.level == 4  # the group {4, 8} agrees within one step; 16 stands alone
    assert k.confidence == 0.5 and k.confidence_label == "medium"


def test_methods_that_all_disagree_give_no_knee_rather_than_a_guess() -> None:
    answers = [MethodAnswer("a", 0, 1.0), MethodAnswer("b", 3, 32.0), MethodAnswer("c", 5, 128.0)]
    k = combine("latency", [1, 8, 16, 32, 64, 128, 256], answers)
    assert k.level is None and k.undetermined and not k.reached and k.confidence == 0


def test_two_lone_answers_against_two_no_knees_is_not_a_knee() -> None:
    # The embedded demo's latency curve: one method fired at 1, the server queue at 128, two found nothing.
    answers = [
        MethodAnswer("kneedle", None, None),
        MethodAnswer("growth", 0, 1.0),
        MethodAnswer("segmented", None, None),
        MethodAnswer("queueing", 5, 128.0),
    ]
    k = combine("latency", [1, 8, 16, 32, 64, 128, 256], answers)
    assert k.level is None and not k.undetermined and k.confidence == 0.5


def test_too_few_levels_halve_the_confidence() -> None:
    k = throughput_knee([1, 2, 4], [100, 200, 210])
    assert k.confidence <= 0.5


@pytest.mark.parametrize(
    ("levels", "values", "message"),
    [
        ([1, 2, 2, 4], [1, 2, 3, 4], "strictly increasing"),
        ([1], [1], "at least 2"),
        ([1, 2, 4], [1, 2], "levels but"),
        ([0, 1, 2], [1, 2, 3], "positive"),
        ([1, 2, 4], [1, float("nan"), 2], "finite"),
    ],
)
def test_bad_curves_are_refused_with_a_reason(levels: list[float], values: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        throughput_knee(levels, values)


def test_latency_flat_then_queueing_gives_the_last_flat_level() -> None:
    ttft = [20.0 if x <= 8 else 20.0 + 150.0 * (x - 8) for x in LADDER]
    k = latency_knee(LADDER, ttft)
    assert k.level == 8 and k.confidence_label == "high"


def test_latency_wobble_on_loopback_is_not_a_knee() -> None:
    # A few ms of jitter is many times a 1 ms baseline but is not queueing.
    k = latency_knee(LADDER, [1.0, 2.5, 1.2, 4.0, 3.1, 2.2, 5.0, 3.3, 4.4, 2.0, 6.0, 3.0])
    assert not k.reached


def test_latency_extra_method_is_counted() -> None:
    ttft = [20.0 if x <= 8 else 20.0 + 150.0 * (x - 8) for x in LADDER]
    k = latency_knee(LADDER, ttft, extra=[MethodAnswer("queueing", 3, 8.0, "server queue grows from 12")])
    assert "queueing" in methods(k) and k.level == 8


ladders = st.lists(st.integers(1, 512), min_size=3, max_size=14, unique=True).map(sorted)


@settings(max_examples=200, deadline=None)
@given(ladders, st.floats(0.01, 1e5))
def test_property_strictly_linear_never_has_a_throughput_knee(levels: list[int], slope: float) -> None:
    k = throughput_knee(levels, [slope * x for x in levels])
    assert not k.reached


@settings(max_examples=200, deadline=None)
@given(ladders, st.lists(st.floats(0, 1e6), min_size=14, max_size=14))
def test_property_knee_is_always_a_tested_level_or_none(levels: list[int], raw: list[float]) -> None:
    y = raw[: len(levels)]
    for k in (throughput_knee(levels, y), latency_knee(levels, y)):
        assert k.level is None or k.level in levels
        assert 0.0 <= k.confidence <= 1.0
        assert k.reached == (k.level is not None)
        # A knee at the very top of the range is never claimed: it is not evidence of a bend.
        assert k.level != levels[-1]


@settings(max_examples=100, deadline=None)
@given(ladders, st.floats(1, 1e4), st.floats(0.1, 1e4))
def test_property_scaling_throughput_does_not_move_the_knee(levels: list[int], cap: float, scale: float) -> None:
    y = [min(x, cap) for x in levels]
    a = throughput_knee(levels, y)
    b = throughput_knee(levels, [scale * v for v in y])
    assert a.level == b.level
