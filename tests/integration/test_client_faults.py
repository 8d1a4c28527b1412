"""Every request-level fault of a real streaming server lands in its error class, and send() never raises.

One slot server process serves all faults, chosen per request with the ``x-fault`` header.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from llm_knee.client import ClientConfig, OpenAIClient, TargetUnreachable
from llm_knee.records.schema import ErrorClass, RequestRecord
from tests.servers.launch import server_stats, start_slot_server

pytestmark = pytest.mark.timeout(60)

N_TOKENS = 8


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with start_slot_server(slots=32, token_delay_ms=2, prefill_ms_per_token=0.01) as (url, _):
        yield url


async def send_once(url: str, *, fault: str | None = None, n: int = N_TOKENS, **cfg: Any) -> RequestRecord:
    headers = {"x-fault": fault} if fault else {}
    config = ClientConfig(url, headers=headers, **cfg)
    async with OpenAIClient(config, time.perf_counter_ns()) as client:
        record = RequestRecord("r", 0, 1.0)
        returned = await client.send("one two three four", None, n, record)
    assert returned is record
    return record


FAULT_CASES = [
    # fault, class, start of the detail, HTTP status
    ("http500", ErrorClass.HTTP_5XX, "HTTP 500: simulated HTTP 500 from slot_server", 500),
    ("http429", ErrorClass.HTTP_4XX, "HTTP 429: simulated HTTP 429 from slot_server", 429),
    ("http400", ErrorClass.HTTP_4XX, "HTTP 400: simulated HTTP 400 from slot_server", 400),
    ("malformed_json", ErrorClass.MALFORMED, "non-JSON data line: {this is not json", 200),
    ("invalid_utf8", ErrorClass.MALFORMED, "invalid UTF-8 in data line", 200),
    ("error_object", ErrorClass.HTTP_5XX, "200 carrying error object: code 500: simulated engine failure", 200),
    ("error_object:400", ErrorClass.HTTP_4XX, "200 carrying error object: code 400: simulated engine", 200),
    ("empty_choices", ErrorClass.INCOMPLETE, "stream ended with [DONE] and carried no output content", 200),
    ("truncate", ErrorClass.INCOMPLETE, "4 of 8 output tokens (content chunks counted, no usage); stream ended", 200),
    ("short", ErrorClass.INCOMPLETE, "4 of 8 output tokens (usage.completion_tokens)", 200),
    ("reset", ErrorClass.RESET, "connection closed mid-stream after 4 content chunks", 200),
    ("error_json", ErrorClass.HTTP_5XX, "200 carrying error object: code 500: simulated failure", 200),
    ("error_json:429", ErrorClass.HTTP_4XX, "200 carrying error object: code 429: simulated failure", 200),
    ("unstreamed", ErrorClass.MALFORMED, "expected an SSE stream (text/event-stream) but got a plain", 200),
]


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize(("fault", "cls", "detail", "status"), FAULT_CASES, ids=[c[0] for c in FAULT_CASES])
async def test_fault_lands_in_its_class(
    base_url: str, api: str, fault: str, cls: ErrorClass, detail: str, status: int
) -> None:
    rec = await send_once(base_url, fault=fault, api=api)
    assert rec.error is cls
    assert rec.error_detail.startswith(detail), rec.error_detail
    assert rec.http_status == status
    assert rec.retries == 0
    assert 0 <= rec.sent_ns <= rec.first_byte_ns <= rec.end_ns


async def test_long_http_error_message_is_kept_but_capped_at_500_characters(base_url: str) -> None:
    rec = await send_once(base_url, fault="http400:5000")
    assert rec.error is ErrorClass.HTTP_4XX
    assert rec.error_detail.startswith("HTTP 400: simulated HTTP 400 from slot_server xxx")
    assert len(rec.error_detail) == 500


async def test_body_that_never_ends_after_done_is_a_success_ended_at_done(base_url: str) -> None:
    start = time.monotonic()
    rec = await send_once(base_url, fault="hang_after_done")
    assert time.monotonic() - start < 3.0  # bounded by the client's grace after [DONE], not the total timeout
    assert rec.ok, rec.error_detail
    assert rec.output_chunks == N_TOKENS
    assert rec.end_ns - rec.last_token_ns < 500_000_000  # the end is when [DONE] came, not when we gave up


async def test_connection_reset_after_done_is_a_success(base_url: str) -> None:
    rec = await send_once(base_url, fault="reset_after_done")
    assert rec.ok, rec.error_detail
    assert rec.output_chunks == N_TOKENS and rec.end_ns >= rec.last_token_ns


async def test_hang_after_headers_is_a_first_token_timeout(base_url: str) -> None:
    start = time.monotonic()
    rec = await send_once(base_url, fault="hang", first_token_timeout_s=0.3)
    assert time.monotonic() - start < 2.0
    assert rec.error is ErrorClass.TIMEOUT_FIRST_TOKEN
    assert rec.error_detail == "no output content within 0.3 s of the send, after the response headers"
    assert rec.http_status == 200 and rec.first_byte_ns >= rec.sent_ns and rec.first_token_ns == -1


async def test_hang_before_headers_is_a_first_token_timeout(base_url: str) -> None:
    rec = await send_once(base_url, fault="hang_before_headers", first_token_timeout_s=0.3)
    assert rec.error is ErrorClass.TIMEOUT_FIRST_TOKEN
    assert rec.error_detail == "no output content within 0.3 s of the send, and no response headers"
    assert rec.http_status is None and rec.first_byte_ns == -1
    assert 0.3e9 <= rec.end_ns - rec.sent_ns < 2e9


async def test_stream_slower_than_the_total_timeout_is_a_total_timeout(base_url: str) -> None:
    rec = await send_once(base_url, n=2000, total_timeout_s=0.4)
    assert rec.error is ErrorClass.TIMEOUT_TOTAL
    assert rec.error_detail.startswith("response not complete within 0.4 s of the send (")
    assert 0 < rec.output_chunks < 2000
    assert 0.4e9 <= rec.end_ns - rec.sent_ns < 2e9


async def test_first_token_timeout_does_not_cut_a_stream_that_already_started(base_url: str) -> None:
    # 60 tokens x 2 ms outlast the 0.05 s first-token limit; only the first token is bound by it.
    rec = await send_once(base_url, n=60, first_token_timeout_s=0.05)
    assert rec.ok, rec.error_detail


async def test_refused_connection_is_classified_and_check_target_says_what_to_do() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        url = f"http://127.0.0.1:{port}"
        rec = await send_once(url)
        assert rec.error is ErrorClass.REFUSED
        assert rec.error_detail == f"cannot connect to 127.0.0.1:{port}: connection refused"
        assert rec.http_status is None and rec.end_ns >= rec.sent_ns
        async with OpenAIClient(ClientConfig(url), time.perf_counter_ns()) as client:
            with pytest.raises(TargetUnreachable) as info:
                await client.check_target()
    assert str(info.value) == (f"cannot connect to {url}: connection refused. Is the server running? Check --url.")


def saturated_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A loopback listener whose accept queue is full, so new SYNs are dropped and connects hang.

    Linux drops a SYN when the listener's accept queue is full; with backlog 0 and nothing accepted,
    one or two queued connections fill it.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers: list[socket.socket] = []
    for _ in range(8):
        filler = socket.socket()
        filler.settimeout(0.2)
        fillers.append(filler)
        try:
            filler.connect(listener.getsockname())
        except TimeoutError:
            return listener, fillers  # this one hangs: the queue is full
    raise AssertionError("could not fill the loopback accept queue; connect timeouts cannot be provoked")


async def test_connect_timeout_on_a_full_accept_queue() -> None:
    listener, fillers = saturated_listener()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        rec = await send_once(url, connect_timeout_s=0.3)
        assert rec.error is ErrorClass.TIMEOUT_CONNECT
        assert rec.error_detail == "no TCP connection within 0.3 s"
        assert 0.3e9 <= rec.end_ns - rec.sent_ns < 2e9
        async with OpenAIClient(ClientConfig(url, connect_timeout_s=0.3), time.perf_counter_ns()) as client:
            with pytest.raises(TargetUnreachable, match=r"no TCP connection within 0.3 s\. Is the server running"):
                await client.check_target()
    finally:
        for sock in (*fillers, listener):
            sock.close()


async def test_a_run_goes_on_through_random_faults() -> None:
    faults = {"http500": 0.2, "truncate": 0.2, "malformed_json": 0.2}
    with start_slot_server(slots=8, token_delay_ms=1, fault_rate=faults, seed=3) as (url, _):
        async with OpenAIClient(ClientConfig(url), time.perf_counter_ns()) as client:
            records = [RequestRecord(str(i), 0, 1.0) for i in range(40)]
            for rec in records:
                await client.send("a b c", None, 4, rec)
        injected = sum(server_stats(url)["faults"].values())
    assert injected == sum(not rec.ok for rec in records)
    classes = {rec.error for rec in records}
    assert classes == {ErrorClass.OK, ErrorClass.HTTP_5XX, ErrorClass.INCOMPLETE, ErrorClass.MALFORMED}
