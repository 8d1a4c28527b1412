"""The one place where aiohttp and OS exceptions become error classes and plain-words reasons."""

from __future__ import annotations

import errno

import aiohttp
import orjson

from llm_knee.client.stream import truncate
from llm_knee.records.schema import ErrorClass

# Exceptions that, raised before any response byte on a reused keep-alive connection, mean the server
# had already closed that connection (llama.cpp does this after every stream): worth one retry.
STALE_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
)

_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset by peer",
    errno.EPIPE: "broken pipe",
    errno.ETIMEDOUT: "connection timed out",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
}


def os_reason(exc: BaseException) -> str:
    """A short human reason for a connection-level exception."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "host name not found"
    os_error = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(os_error, OSError) and os_error.errno in _ERRNO_WORDS:
        return _ERRNO_WORDS[os_error.errno]
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror.lower()
    return str(exc) or type(exc).__name__


def is_stale_connection_error(exc: BaseException) -> bool:
    """A send/receive failure (not a connect failure) of the kind a dead pooled connection gives."""
    return isinstance(exc, STALE_CONNECTION_ERRORS) and not isinstance(exc, aiohttp.ClientConnectorError)


def classify_exception(
    exc: BaseException, *, got_headers: bool, chunks: int, connect_timeout_s: float
) -> tuple[ErrorClass, str]:
    """Error class and detail for a library exception raised while sending or reading one request.

    ``got_headers``: the response status line and headers had arrived; ``chunks``: content chunks
    seen so far. Our own first-token/total deadlines are classified by the caller, which knows them.
    """
    where = f"mid-stream after {chunks} content chunks" if got_headers else "before any response byte"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ErrorClass.TIMEOUT_CONNECT, f"no TCP connection within {connect_timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        reason = os_reason(exc)
        return ErrorClass.REFUSED, truncate(f"cannot connect to {exc.host}:{exc.port}: {reason}")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return ErrorClass.RESET, truncate(f"connection closed {where}: {exc}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return ErrorClass.RESET, f"server disconnected {where}"
    if isinstance(exc, aiohttp.ClientResponseError):
        # Raised by aiohttp itself (we never call raise_for_status): the response was not valid HTTP.
        return ErrorClass.MALFORMED, truncate(f"invalid HTTP response {where}: {exc.message}")
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return ErrorClass.TIMEOUT_TOTAL, truncate(f"socket timeout {where}: {exc}")
    if isinstance(exc, OSError):  # ClientOSError, ClientConnectionResetError and raw socket errors
        return ErrorClass.RESET, truncate(f"{os_reason(exc)} {where}")
    if isinstance(exc, aiohttp.ClientError):
        return ErrorClass.MALFORMED, truncate(f"{type(exc).__name__} {where}: {exc}")
    raise TypeError(f"not a transport exception: {exc!r}") from exc


def error_body_message(body: bytes) -> str:
    """The human message inside an HTTP error body: OpenAI ``error.message``, FastAPI ``detail``, or text."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", errors="replace").strip()
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        for key in ("message", "detail", "error"):
            value = obj.get(key)
            if isinstance(value, str):
                return value
    return orjson.dumps(obj).decode()
