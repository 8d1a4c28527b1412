"""Level summaries: which records count for what, and the figures they give."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_knee.analysis.slo import parse_slo
from llm_knee.analysis.stats import is_stable, percentile
from llm_knee.analysis.summary import Window, summarize_level
from llm_knee.records.schema import ErrorClass, RequestRecord

MS = 1_000_000
S = 1_000_000_000


def rec(
    start_ms: float,
    ttft_ms: float = 100,
    tokens: int = 11,
    itl_ms: float = 10,
    *,
    error: ErrorClass = ErrorClass.OK,
    warmup: bool = False,
    scheduled_ms: float | None = None,
    server_tokens: int | None = None,
    prompt: int = 50,
) -> RequestRecord:
    sent = int(start_ms * MS)
    r = RequestRecord(
        request_id=f"r{start_ms}",
        level_index=0,
        level=4,
        warmup=warmup,
        scheduled_ns=int(scheduled_ms * MS) if scheduled_ms is not None else sent,
        sent_ns=sent,
        prompt_tokens=prompt,
        output_tokens_requested=tokens,
        error=error,
    )
    if error is ErrorClass.OK or tokens:
        r.first_byte_ns = sent + int(ttft_ms * MS) // 2
        r.first_token_ns = sent + int(ttft_ms * MS)
        r.itl_ns = [int(itl_ms * MS)] * (tokens - 1)
        r.last_token_ns = r.first_token_ns + sum(r.itl_ns)
        r.output_chunks = tokens
        r.output_tokens_server = server_tokens
    r.end_ns = max(r.last_token_ns, sent) + MS
    return r


def test_latency_percentiles_use_measured_successes_only() -> None:
    records = [rec(t * 100, ttft_ms=100 + t) for t in range(100)]
    records.append(rec(50, ttft_ms=5000, warmup=True))  # warm-up: never counted
    records.append(rec(60, error=ErrorClass.HTTP_5XX, tokens=0))
    s = summarize_level(records, level_index=0, level=4, mode="closed", window=Window(0, 10 * S))
    assert s.requests == 101 and s.ok == 100
    assert s.ttft_p50_ms == pytest.approx(149.5)
    assert s.ttft_p99_ms == pytest.approx(percentile([100 + t for t in range(100)], 99))
    assert s.errors["http_5xx"] == 1 and s.error_rate == pytest.approx(1 / 101)
    assert s.tpot_p50_ms == pytest.approx(10.0)
    assert s.decode_tok_s_per_user_p50 == pytest.approx(100.0)


def test_throughput_counts_only_tokens_inside_the_window() -> None:
    # One request streams 11 tokens at t = 1.0, 1.01, ..., 1.10 s; the window cuts it after 1.05 s.
    r = rec(900, ttft_ms=100, tokens=11, itl_ms=10)
    s = summarize_level([r], level_index=0, level=4, mode="closed", window=Window(0, int(1.055 * S)))
    assert s.output_tok_s == pytest.approx(6 / 1.055)
    assert s.req_s == 0  # it completed after the window


def test_server_usage_scales_multi_token_chunks() -> None:
    # vLLM multi-step: 5 chunks carried 50 tokens.
    r = rec(0, tokens=5, server_tokens=50)
    s = summarize_level([r], level_index=0, level=1, mode="closed", window=Window(0, 1 * S))
    assert s.output_tok_s == pytest.approx(50)
    assert s.mean_output_tokens == 50


def test_open_loop_latency_counts_from_the_scheduled_time() -> None:
    late = rec(1000, ttft_ms=100, scheduled_ms=700)  # waited 300 ms inside the client
    s = summarize_level([late], level_index=0, level=2, mode="open", window=Window(0, 2 * S))
    assert s.ttft_p50_ms == pytest.approx(400)
    assert s.queue_p50_ms == pytest.approx(300)


def test_slo_goodput_and_failures_count_as_misses() -> None:
    fast = [rec(t * 10, ttft_ms=100) for t in range(98)]
    slow = [rec(990, ttft_ms=900)]
    failed = [rec(995, error=ErrorClass.TIMEOUT_TOTAL, tokens=0)]
    slo = parse_slo("ttft_p99=500ms")
    s = summarize_level(fast + slow + failed, level_index=0, level=4, mode="closed", window=Window(0, 10 * S), slo=slo)
    assert s.goodput_req_s == pytest.approx(98 / 10)
    assert s.slo_met is False  # 2 of 100 over the limit: P99 misses
    s2 = summarize_level(fast, level_index=0, level=4, mode="closed", window=Window(0, 10 * S), slo=slo)
    assert s2.slo_met is True


def test_slo_parse_errors_say_what_to_write() -> None:
    assert [str(o) for o in parse_slo("ttft_p99=0.5s, tpot_p50=50")] == ["ttft_p99=500ms", "tpot_p50=50ms"]
    for bad in ("ttft=500ms", "foo_p99=1ms", "ttft_p99=-1ms", "", "ttft_p100=5ms"):
        with pytest.raises(ValueError, match=r"SLO|percentile"):
            parse_slo(bad)


def test_steady_state_rule() -> None:
    assert not is_stable([100, 101])
    assert is_stable([50, 100, 101, 99])
    assert not is_stable([100, 130, 100])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=200), st.floats(0, 100), st.floats(0, 100))
def test_property_percentiles_are_ordered_and_bounded(values: list[float], q1: float, q2: float) -> None:
    lo, hi = sorted((q1, q2))
    a, b = percentile(values, lo), percentile(values, hi)
    assert a is not None and b is not None
    assert min(values) <= a <= b <= max(values)


def test_percentile_of_nothing_is_none_and_bad_q_is_refused() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)
