"""Recommendation, watermark and alarms from level summaries."""

from __future__ import annotations

import pytest

from llm_knee.analysis.recommend import AnalysisSettings, find_alarms, recommend
from llm_knee.analysis.summary import LevelSummary
from llm_knee.records.schema import ERROR_CLASSES

LADDER = [1, 2, 4, 8, 12, 16, 20, 24]


def level(i: int, x: float, tput: float, ttft_p99: float, **kw: object) -> LevelSummary:
    base: dict[str, object] = dict(
        level_index=i, level=x, mode="closed", window_s=10.0, requests=100, ok=100,
        errors={c.value: 0 for c in ERROR_CLASSES}, error_rate=0.0, req_s=tput / 100, output_tok_s=tput,
        prefill_tok_s=0.0, total_tok_s=tput, ttft_mean_ms=ttft_p99 / 2, ttft_p50_ms=ttft_p99 / 2,
        ttft_p90_ms=None, ttft_p95_ms=None, ttft_p99_ms=ttft_p99, tpot_p50_ms=10.0, tpot_p99_ms=12.0,
        itl_p50_ms=10.0, itl_p99_ms=12.0, e2e_p50_ms=1000.0, e2e_p99_ms=1200.0, decode_tok_s_per_user_p50=100.0,
        decode_tok_s_per_user_p10=90.0, queue_p50_ms=None, queue_p99_ms=None, mean_input_tokens=512.0,
        mean_output_tokens=256.0, retries=0,
    )  # fmt: skip
    base.update(kw)
    return LevelSummary(**base)  # type: ignore[arg-type]


def slot_server_levels(slots: int = 8) -> list[LevelSummary]:
    return [
        level(i, x, 100.0 * min(x, slots), 40.0 if x <= slots else 40.0 + 200.0 * (x - slots))
        for i, x in enumerate(LADDER)
    ]


def test_recommendation_is_the_smaller_knee_and_the_watermark_is_65_percent() -> None:
    r = recommend(slot_server_levels())
    assert r.recommended == 8 and r.safe == 5 and not r.lower_bound
    assert "Run at most 8 concurrent requests" in r.sentence and "keep production at 5" in r.sentence


def test_errors_cap_the_recommendation_below_the_knee() -> None:
    lv = slot_server_levels()
    lv[3] = level(3, 8, 800.0, 40.0, error_rate=0.02, errors={"http_5xx": 2})
    r = recommend(lv)
    assert r.recommended == 4
    assert any("exceed the budget" in x for x in r.limits)
    assert recommend(lv, AnalysisSettings(error_budget=0.05)).recommended == 8


def test_no_knee_in_range_is_a_lower_bound_said_plainly() -> None:
    lv = [level(i, x, 100.0 * x, 40.0) for i, x in enumerate(LADDER)]
    r = recommend(lv)
    assert r.lower_bound and r.recommended == 24
    assert "extend --levels" in r.sentence


def test_every_level_failing_gives_no_recommendation() -> None:
    lv = [level(i, x, 100.0 * x, 40.0, error_rate=0.5) for i, x in enumerate(LADDER)]
    r = recommend(lv)
    assert r.recommended is None and r.safe is None
    assert r.sentence.startswith("No safe load found")


def test_excluded_levels_are_neither_fitted_nor_recommended() -> None:
    r = recommend(slot_server_levels(), exclude={3})
    assert r.recommended is not None and r.recommended != 8


def test_alarms_fire_once_at_their_first_level() -> None:
    lv = slot_server_levels()
    lv[5] = level(5, 16, 800.0, 1700.0, ttft_p50_ms=100.0, decode_tok_s_per_user_p50=20.0, error_rate=0.01)
    names = {a.name: a.level for a in find_alarms(lv, AnalysisSettings())}
    assert names["ttft_p99_over_target"] == 12  # 40 + 200*4 = 840 ms
    assert names["ttft_p99_stop_admitting"] == 16
    assert names["per_user_decode_slow"] == 16
    assert names["errors"] == 16
    assert names["ttft_tail"] == 16  # 1700 > 3 × 100


def test_watermark_outside_practice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"0\.6"):
        AnalysisSettings(watermark=0.9)
