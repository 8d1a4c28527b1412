"""The server sampler reads an engine's /metrics page and speaks our metric names.

Pages are recorded-format Prometheus text for vLLM, SGLang, TGI and llama.cpp (tests/telemetry/data/
metrics). The live tests scrape a real aiohttp server in a subprocess on 127.0.0.1 that serves those
pages in order, so counters move between scrapes as they do on a loaded server.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from llm_knee.telemetry import names
from llm_knee.telemetry.server import (
    ServerMetricsSampler,
    detect_engine,
    metrics_url,
    normalise,
    parse_metrics_text,
)
from llm_knee.telemetry.summarize import group_series, histogram_mean

METRICS = Path(__file__).parent / "data" / "metrics"


def page(name: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return parse_metrics_text((METRICS / f"{name}.prom").read_text())


@pytest.mark.parametrize(
    ("page_name", "engine", "expected"),
    [
        (
            "vllm_003",
            "vllm",
            {
                names.SERVER_REQUESTS_RUNNING: 64,
                names.SERVER_REQUESTS_WAITING: 17,
                names.SERVER_KV_USAGE: 0.97,
                names.SERVER_PREEMPTIONS_TOTAL: 5,
                names.SERVER_TTFT_COUNT: 160,
                names.SERVER_GENERATION_TOKENS_TOTAL: 40960,
            },
        ),
        (
            "sglang_000",
            "sglang",
            {
                names.SERVER_REQUESTS_RUNNING: 24,
                names.SERVER_REQUESTS_WAITING: 6,
                names.SERVER_KV_USAGE: 0.63,
                names.SERVER_TTFT_SUM: 102.4,
                names.SERVER_ITL_COUNT: 261120,
            },
        ),
        (
            "tgi_000",
            "tgi",
            {
                names.SERVER_REQUESTS_RUNNING: 12,
                names.SERVER_REQUESTS_WAITING: 4,
                names.SERVER_QUEUE_TIME_SUM: 45.9,
                names.SERVER_TPOT_COUNT: 298,
            },
        ),
        (
            "llamacpp_002",
            "llamacpp",
            {
                names.SERVER_REQUESTS_RUNNING: 16,
                names.SERVER_REQUESTS_WAITING: 12,
                names.SERVER_GENERATION_TOKENS_TOTAL: 6144,
                names.SERVER_BUSY_SLOTS_PER_DECODE: 15.6,
            },
        ),
    ],
)
def test_each_engine_is_recognised_and_mapped_to_our_names(
    page_name: str, engine: str, expected: dict[str, float]
) -> None:
    parsed = page(page_name)
    assert detect_engine(parsed) == engine
    values = normalise(parsed, engine)
    for name, value in expected.items():
        assert values[name] == pytest.approx(value), name


def test_llamacpp_without_kv_gauge_reports_no_kv_usage_rather_than_zero() -> None:
    assert names.SERVER_KV_USAGE not in normalise(page("llamacpp_002"), "llamacpp")


def test_label_sets_of_one_gauge_are_summed_and_fractions_averaged() -> None:
    text = (
        'vllm:num_requests_waiting{engine="0"} 3\nvllm:num_requests_waiting{engine="1"} 4\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:kv_cache_usage_perc{engine="1"} 0.7\n'
    )
    values = normalise(parse_metrics_text(text), "vllm")
    assert values[names.SERVER_REQUESTS_WAITING] == 7
    assert values[names.SERVER_KV_USAGE] == pytest.approx(0.6)


def test_older_vllm_names_are_still_read() -> None:
    text = "vllm:gpu_cache_usage_perc 0.25\nvllm:time_per_output_token_seconds_sum 3.0\n"
    values = normalise(parse_metrics_text(text), "vllm")
    assert values[names.SERVER_KV_USAGE] == 0.25
    assert values[names.SERVER_ITL_SUM] == 3.0


def test_a_page_without_engine_metrics_is_not_taken_for_an_engine() -> None:
    assert detect_engine(page("other_000")) is None


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/metrics"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/metrics"),
        ("http://h:1", "http://h:1/metrics"),
        ("http://h:1/metrics", "http://h:1/metrics"),
    ],
)
def test_metrics_url_is_at_the_server_root(base: str, url: str) -> None:
    assert metrics_url(base) == url


def test_unknown_engine_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown engine 'vlm'"):
        ServerMetricsSampler("http://127.0.0.1:1", engine="vlm")


async def test_vllm_server_is_detected_and_its_counters_move_between_scrapes(metrics_server, fake_clock) -> None:
    port = metrics_server("vllm")
    sampler = ServerMetricsSampler(f"http://127.0.0.1:{port}/v1")
    status = await sampler.open(fake_clock)  # scrapes page 0
    assert status.available, status.reason
    assert sampler.engine == "vllm"
    assert "vLLM" in status.detail
    samples = []
    for _ in range(3):  # pages 1, 2, 3
        fake_clock.advance(1.0)
        samples += await sampler.sample(fake_clock)
    await sampler.close()
    assert {s.source for s in samples} == {"server"}
    waiting = [s.value for s in samples if s.name == names.SERVER_REQUESTS_WAITING]
    assert waiting == [0.0, 3.0, 17.0]
    # Per-interval mean server TTFT from the histogram's sum and count deltas.
    sums = next(iter(group_series(samples, names.SERVER_TTFT_SUM).values()))
    counts = next(iter(group_series(samples, names.SERVER_TTFT_COUNT).values()))
    t1, t2, t3 = (t for t, _ in sums)
    mean, n = histogram_mean(sums, counts, t2, t3)  # type: ignore[misc]
    assert (mean, n) == (pytest.approx(0.120), 64.0)
    mean, n = histogram_mean(sums, counts, t3, t3 + 1)  # type: ignore[misc]
    assert (mean, n) == (pytest.approx(0.480), 80.0)
    assert all(t1 <= s.t_ns <= t3 for s in samples)


async def test_llamacpp_deferred_requests_are_the_waiting_queue(metrics_server, fake_clock) -> None:
    port = metrics_server("llamacpp")
    sampler = ServerMetricsSampler(f"http://127.0.0.1:{port}")
    assert (await sampler.open(fake_clock)).available
    assert sampler.engine == "llamacpp"
    got = {}
    for _ in range(2):
        for s in await sampler.sample(fake_clock):
            got.setdefault(s.name, []).append(s.value)
    await sampler.close()
    assert got[names.SERVER_REQUESTS_WAITING] == [0.0, 12.0]
    assert got[names.SERVER_REQUESTS_RUNNING] == [4.0, 16.0]
    assert got[names.SERVER_PROMPT_TOKENS_TOTAL] == [2048.0, 10240.0]


async def test_missing_metrics_endpoint_is_reported_once_with_a_hint(metrics_server, fake_clock, caplog) -> None:
    port = metrics_server("llamacpp")
    sampler = ServerMetricsSampler(f"http://127.0.0.1:{port}/elsewhere")
    with caplog.at_level(logging.WARNING, logger="llm_knee.telemetry"):
        status = await sampler.open(fake_clock)
        for _ in range(3):
            assert await sampler.sample(fake_clock) == []
    await sampler.close()
    assert not status.available
    assert "HTTP 404" in status.reason and "--metrics" in status.reason
    assert sampler.unavailable_reason == status.reason
    lines = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].exc_info is None


async def test_a_server_that_is_not_listening_is_reported_not_raised(fake_clock) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sampler = ServerMetricsSampler(f"http://127.0.0.1:{port}", timeout_s=2.0)
    status = await sampler.open(fake_clock)
    await sampler.close()
    assert not status.available
    assert "cannot scrape" in status.reason and str(port) in status.reason


async def test_a_page_of_unrelated_metrics_says_which_engines_were_looked_for(metrics_server, fake_clock) -> None:
    port = metrics_server("other")
    sampler = ServerMetricsSampler(f"http://127.0.0.1:{port}")
    status = await sampler.open(fake_clock)
    await sampler.close()
    assert not status.available
    assert "no vLLM, SGLang, TGI or llama.cpp metrics" in status.reason
