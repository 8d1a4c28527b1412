"""Successful streams against a real server: exact counts, consistent times, what is sent, long inputs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llm_knee.client import ClientConfig, OpenAIClient, TargetAuthError, TargetProtocolError
from llm_knee.records.schema import ErrorClass, RequestRecord
from tests.servers.launch import reset_stats, server_stats, start_slot_server

pytestmark = pytest.mark.timeout(60)

EOS_AFTER = 5  # the server ends answers here unless told to ignore EOS


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with start_slot_server(slots=4, token_delay_ms=2, prefill_ms_per_token=0.001, eos_after=EOS_AFTER) as (url, _):
        yield url


async def send_once(url: str, prompt: str, n: int, **cfg: Any) -> RequestRecord:
    async with OpenAIClient(ClientConfig(url, **cfg), time.perf_counter_ns()) as client:
        return await client.send(prompt, None, n, RequestRecord("r", 0, 1.0))


def assert_consistent(rec: RequestRecord, n: int) -> None:
    assert rec.ok, rec.error_detail
    assert rec.http_status == 200 and rec.error_detail == "" and rec.retries == 0
    assert 0 <= rec.sent_ns <= rec.first_byte_ns <= rec.first_token_ns <= rec.last_token_ns <= rec.end_ns
    assert rec.output_tokens_requested == n
    assert rec.output_chunks == n
    assert len(rec.itl_ns) == rec.output_chunks - 1
    assert sum(rec.itl_ns) == rec.last_token_ns - rec.first_token_ns
    assert all(gap >= 0 for gap in rec.itl_ns)


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_success_has_exact_token_count_and_ordered_times(base_url: str, api: str) -> None:
    prompt = " ".join(f"w{i}" for i in range(12))
    rec = await send_once(base_url, prompt, 37, api=api)
    assert_consistent(rec, 37)
    assert rec.output_tokens_server == 37 and rec.prompt_tokens_server == 12
    # 37 tokens one per 2 ms: the stream cannot be shorter than 36 gaps of ~2 ms.
    assert rec.last_token_ns - rec.first_token_ns >= 36 * 1_500_000


async def test_without_usage_the_count_comes_from_chunks(base_url: str) -> None:
    rec = await send_once(base_url, "a b", 9, extra_body={"stream_options": {"include_usage": False}})
    assert_consistent(rec, 9)
    assert rec.output_tokens_server is None and rec.output_tokens == 9


async def test_ignore_eos_gets_the_full_length_and_without_it_a_short_answer_is_incomplete(base_url: str) -> None:
    full = await send_once(base_url, "a b", 12)
    assert_consistent(full, 12)
    short = await send_once(base_url, "a b", 12, ignore_eos=False)
    assert short.error is ErrorClass.INCOMPLETE
    assert short.error_detail == f"{EOS_AFTER} of 12 output tokens (usage.completion_tokens)"


async def test_check_target_finds_the_model_and_requests_carry_it(base_url: str) -> None:
    config = ClientConfig(base_url, api="chat", extra_body={"temperature": 0.5})
    async with OpenAIClient(config, time.perf_counter_ns()) as client:
        assert client.model is None
        assert await client.check_target() == "slot-model"
        assert client.model == "slot-model"
        rec = await client.send("hi there", None, 6, RequestRecord("r", 0, 1.0))
    assert_consistent(rec, 6)
    assert server_stats(base_url)["last_request"] == {
        "model": "slot-model",
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "min_tokens": 6,
        "temperature": 0.5,
    }


async def test_configured_model_wins_over_the_listing(base_url: str) -> None:
    async with OpenAIClient(ClientConfig(base_url, model="mine"), time.perf_counter_ns()) as client:
        assert await client.check_target() == "mine"


async def test_long_prompt_and_a_data_line_far_over_64_kib_survive(base_url: str) -> None:
    words = 150_000
    prompt = "w " * words  # 300 KB; echo puts all of it in the first SSE data line
    assert len(prompt) == 300_000
    rec = await send_once(base_url, prompt, 4, extra_body={"echo": True})
    assert_consistent(rec, 4)
    assert rec.prompt_tokens_server == words
    assert server_stats(base_url)["last_request"]["echo"] is True


async def test_token_counter_sees_every_content_chunk(base_url: str) -> None:
    class Live:
        tokens = 0

    live = Live()
    async with OpenAIClient(ClientConfig(base_url, api="chat"), time.perf_counter_ns()) as client:
        for _ in range(3):
            await client.send("a", None, 7, RequestRecord("r", 0, 1.0), on_token=live)
    assert live.tokens == 21


async def test_requests_beyond_the_slots_queue_on_the_server(base_url: str) -> None:
    reset_stats(base_url)
    async with OpenAIClient(ClientConfig(base_url), time.perf_counter_ns(), concurrency=8) as client:
        records = [RequestRecord(str(i), 0, 8.0) for i in range(8)]
        await asyncio.gather(*(client.send("a b", None, 20, rec) for rec in records))
    stats = server_stats(base_url)
    assert (stats["max_in_flight"], stats["max_running"]) == (8, 4)
    ttfts = sorted(rec.first_token_ns - rec.sent_ns for rec in records)
    # The second wave waits for a whole first-wave answer (20 tokens x 2 ms) before its first token.
    assert ttfts[4] - ttfts[3] >= 30_000_000


@pytest.fixture(scope="module")
def keyed_url() -> Iterator[str]:
    with start_slot_server(slots=2, token_delay_ms=1, api_key="sekret") as (url, _):
        yield url


async def test_api_key_is_sent_as_bearer_token(keyed_url: str) -> None:
    async with OpenAIClient(ClientConfig(keyed_url, api_key="sekret"), time.perf_counter_ns()) as client:
        assert await client.check_target() == "slot-model"
        rec = await client.send("a", None, 3, RequestRecord("r", 0, 1.0))
    assert_consistent(rec, 3)


async def test_missing_api_key_is_http_4xx_and_check_target_says_so(keyed_url: str) -> None:
    rec = await send_once(keyed_url, "a", 3)
    assert rec.error is ErrorClass.HTTP_4XX
    assert rec.error_detail == "HTTP 401: invalid or missing API key"
    async with OpenAIClient(ClientConfig(keyed_url, api_key="wrong"), time.perf_counter_ns()) as client:
        with pytest.raises(TargetAuthError, match=r"HTTP 401: invalid or missing API key.*pass --api-key") as info:
            await client.check_target()
    assert info.value.status == 401


async def test_without_a_models_listing_the_configured_model_is_used_or_asked_for() -> None:
    with start_slot_server(slots=1, no_models=True) as (url, _):
        async with OpenAIClient(ClientConfig(url, model="given"), time.perf_counter_ns()) as client:
            assert await client.check_target() == "given"
        async with OpenAIClient(ClientConfig(url), time.perf_counter_ns()) as client:
            with pytest.raises(TargetProtocolError, match=r"has no /v1/models listing \(HTTP 404\).*pass --model NAME"):
                await client.check_target()
