"""Connection handling: no hidden cap on concurrency, and one retry for stale keep-alive connections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from llm_knee.client import ClientConfig, OpenAIClient
from llm_knee.records.schema import ErrorClass, RequestRecord
from tests.servers.launch import reset_stats, server_stats, start_slot_server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def wide_url() -> Iterator[str]:
    # Long answers (5 x 100 ms) so that everything sent at once is in flight at once.
    with start_slot_server(slots=256, token_delay_ms=100, prefill_ms_per_token=0) as (url, _):
        yield url


async def send_many(client: OpenAIClient, count: int, n: int = 5) -> list[RequestRecord]:
    records = [RequestRecord(str(i), 0, float(count)) for i in range(count)]
    await asyncio.gather(*(client.send("a b", None, n, rec) for rec in records))
    return records


async def test_200_simultaneous_requests_are_all_in_flight(wide_url: str) -> None:
    reset_stats(wide_url)
    async with OpenAIClient(ClientConfig(wide_url), time.perf_counter_ns(), concurrency=200) as client:
        records = await send_many(client, 200)
    assert all(rec.ok for rec in records)
    assert server_stats(wide_url)["max_in_flight"] == 200


async def test_a_configured_connection_cap_holds(wide_url: str) -> None:
    reset_stats(wide_url)
    config = ClientConfig(wide_url, max_connections=4)
    async with OpenAIClient(config, time.perf_counter_ns(), concurrency=4) as client:
        records = await send_many(client, 12, n=2)
    assert all(rec.ok for rec in records)
    assert server_stats(wide_url)["max_in_flight"] == 4


async def test_a_cap_below_the_concurrency_is_raised_to_it(wide_url: str) -> None:
    reset_stats(wide_url)
    config = ClientConfig(wide_url, max_connections=4)
    async with OpenAIClient(config, time.perf_counter_ns(), concurrency=12) as client:
        assert client.connection_limit == 12
        records = await send_many(client, 12, n=2)
    assert all(rec.ok for rec in records)
    assert server_stats(wide_url)["max_in_flight"] == 12


@pytest.fixture(scope="module")
def closing_url() -> Iterator[str]:
    # Every answer leaves its connection dead although keep-alive was advertised, like llama.cpp.
    with start_slot_server(slots=32, token_delay_ms=1, fault="close_after_stream") as (url, _):
        yield url


async def test_request_on_a_dead_reused_connection_is_retried_once_and_succeeds(closing_url: str) -> None:
    reset_stats(closing_url)
    async with OpenAIClient(ClientConfig(closing_url), time.perf_counter_ns()) as client:
        records = [await client.send("a b", None, 4, RequestRecord(str(i), 0, 1.0)) for i in range(6)]
    assert [rec.error for rec in records] == [ErrorClass.OK] * 6
    # 1st: fresh connection. 2nd: reuses the dead one, fails before any byte, retried on a fresh unpooled
    # connection. 3rd: the pool is empty again, so a fresh connection... and so on.
    assert [rec.retries for rec in records] == [0, 1, 0, 1, 0, 1]
    assert all(rec.output_chunks == 4 and rec.first_byte_ns >= rec.sent_ns for rec in records)
    assert server_stats(closing_url)["requests_received"] == 6


async def test_concurrent_requests_on_dead_connections_are_each_retried_once(closing_url: str) -> None:
    async with OpenAIClient(ClientConfig(closing_url), time.perf_counter_ns(), concurrency=16) as client:
        rounds = [await send_many(client, 16, n=3) for _ in range(3)]
    assert all(rec.ok for records in rounds for rec in records)
    # Round 1 fills the pool with 16 dead connections, round 2 reuses (and retries) all of them, round 3
    # starts from an empty pool.
    assert [sum(rec.retries for rec in records) for records in rounds] == [0, 16, 0]


async def test_failures_after_response_bytes_are_never_retried() -> None:
    with start_slot_server(slots=4, token_delay_ms=1, fault_rate={"reset": 0.4}, seed=7) as (url, _):
        async with OpenAIClient(ClientConfig(url), time.perf_counter_ns()) as client:
            records = [await client.send("a b", None, 6, RequestRecord(str(i), 0, 1.0)) for i in range(20)]
        stats = server_stats(url)
    resets = [rec for rec in records if rec.error is ErrorClass.RESET]
    assert resets and len(resets) == stats["faults"]["reset"]
    assert all(rec.retries == 0 for rec in records)
    assert stats["requests_received"] == 20
