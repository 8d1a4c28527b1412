"""Library exceptions map to error classes with plain-words details.

The integration tests produce most of these from real sockets; these cover the mapping itself,
including the aiohttp connect timeout that the loopback test provokes through a full accept queue.
"""

from __future__ import annotations

import errno

import aiohttp
import pytest

from llm_knee.client.classify import classify_exception, error_body_message, is_stale_connection_error
from llm_knee.records.schema import ErrorClass


def classify(exc: BaseException, got_headers: bool = False, chunks: int = 0) -> tuple[ErrorClass, str]:
    return classify_exception(exc, got_headers=got_headers, chunks=chunks, connect_timeout_s=2.5)


def test_connect_timeout_is_its_own_class() -> None:
    assert classify(aiohttp.ConnectionTimeoutError("x")) == (
        ErrorClass.TIMEOUT_CONNECT,
        "no TCP connection within 2.5 s",
    )


def test_disconnect_before_and_after_headers_are_resets_that_say_where() -> None:
    assert classify(aiohttp.ServerDisconnectedError()) == (
        ErrorClass.RESET,
        "server disconnected before any response byte",
    )
    cls, detail = classify(aiohttp.ClientPayloadError("Response payload is not completed"), True, 7)
    assert cls is ErrorClass.RESET
    assert detail.startswith("connection closed mid-stream after 7 content chunks")


def test_socket_reset_is_a_reset() -> None:
    exc = aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer")
    assert classify(exc, True, 3) == (ErrorClass.RESET, "connection reset by peer mid-stream after 3 content chunks")


def test_invalid_http_is_malformed() -> None:
    exc = aiohttp.ClientResponseError(None, (), status=400, message="Invalid status line")  # type: ignore[arg-type]
    cls, detail = classify(exc)
    assert cls is ErrorClass.MALFORMED and "Invalid status line" in detail


def test_non_transport_exceptions_are_not_swallowed() -> None:
    with pytest.raises(TypeError):
        classify(KeyError("bug"))


def test_only_send_side_failures_count_as_stale_connections() -> None:
    assert is_stale_connection_error(aiohttp.ServerDisconnectedError())
    assert is_stale_connection_error(aiohttp.ClientOSError(errno.EPIPE, "Broken pipe"))
    assert not is_stale_connection_error(aiohttp.ConnectionTimeoutError())
    assert not is_stale_connection_error(aiohttp.ClientPayloadError("x"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "too long", "code": 400}}', "too long"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b'{"error": "flat error"}', "flat error"),
        (b"upstream connect error", "upstream connect error"),
        (b"\xff bad bytes", "\ufffd bad bytes"),
    ],
)
def test_error_body_message_finds_the_human_text(body: bytes, message: str) -> None:
    assert error_body_message(body) == message
