"""OpenAI-compatible streaming client: one request in, one filled RequestRecord out.

One ``aiohttp.ClientSession`` per client (per process), never one per request: ports are not churned
and connections are reused. The connector has no cap below the concurrency (aiohttp's default of 100
connections silently caps load), and the read buffer is 4 MiB (the 64 KiB default stalls long-context
streams). Stream lines are split by our own parser, so no line length limit applies.

Timeouts, each its own error class: connect (aiohttp's ``sock_connect``), first token (no content
chunk within ``first_token_timeout_s`` of the send) and total (``total_timeout_s`` from the send),
both enforced with one rescheduled ``asyncio.timeout``.

Stale connections: some servers (llama.cpp) close a connection after each stream although they
advertise keep-alive. A request that fails before any response byte with a disconnect or reset on a
*reused* connection is retried once on a fresh, unpooled connection and counted in ``record.retries``;
nothing is retried once a response byte arrived, nor after a timeout or an HTTP error.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace, TracebackType
from typing import Any

import aiohttp
import orjson

from llm_knee.client.classify import (
    classify_exception,
    error_body_message,
    is_stale_connection_error,
    os_reason,
)
from llm_knee.client.config import ClientConfig
from llm_knee.client.errors import (
    TargetAuthError,
    TargetHTTPError,
    TargetProtocolError,
    TargetUnreachable,
)
from llm_knee.client.stream import StreamAccumulator, TokenCounter, error_object_class, truncate
from llm_knee.records.schema import ErrorClass, RequestRecord

READ_BUFSIZE = 4 * 1024 * 1024
# After [DONE], wait this long for the end of the body so the connection can go back to the pool.
DONE_GRACE_S = 1.0
ERROR_BODY_LIMIT = 64 * 1024
JSON_BODY_LIMIT = 16 * 1024 * 1024
CHECK_ANSWER_TIMEOUT_S = 30.0


class _TraceCtx:
    """Per-request facts collected from aiohttp's tracing signals."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _on_connection_reuse(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceConnectionReuseconnParams
) -> None:
    tracked = ctx.trace_request_ctx
    if isinstance(tracked, _TraceCtx):
        tracked.reused = True


class OpenAIClient:
    """Streams requests to ``/v1/completions`` or ``/v1/chat/completions`` and records each one.

    Use as ``async with OpenAIClient(config, anchor_ns) as client``. ``anchor_ns`` is the session's
    ``time.perf_counter_ns()`` anchor: every record time is ``perf_counter_ns() - anchor_ns``.
    ``concurrency`` is the most requests this client will have in flight; a configured
    ``max_connections`` below it is raised to it.
    """

    def __init__(self, config: ClientConfig, anchor_ns: int, *, concurrency: int = 0) -> None:
        self.config = config
        self.anchor_ns = anchor_ns
        self._limit = config.connection_limit(concurrency)
        self._model = config.model
        self._url = config.endpoint_url
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # unpooled, for the one retry

    @property
    def model(self) -> str | None:
        """The model name put in request bodies: the configured one, else what ``check_target`` found."""
        return self._model

    @property
    def connection_limit(self) -> int:
        """The connector's cap on open connections (0 = none)."""
        return self._limit

    async def __aenter__(self) -> OpenAIClient:
        self._session = self._new_session(force_close=False)
        self._fresh = self._new_session(force_close=True)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None

    def _new_session(self, *, force_close: bool) -> aiohttp.ClientSession:
        cfg = self.config
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        headers.update(cfg.headers)
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_on_connection_reuse)
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, force_close=force_close),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout_s),
            read_bufsize=READ_BUFSIZE,
            trace_configs=[trace],
        )

    def _sessions(self) -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        if self._session is None or self._fresh is None:
            raise RuntimeError("OpenAIClient is not open: use it as 'async with OpenAIClient(...) as client'")
        return self._session, self._fresh

    def _now(self) -> int:
        return time.perf_counter_ns() - self.anchor_ns

    def build_body(self, prompt_text: str | None, messages: list[dict[str, Any]] | None, output_tokens: int) -> bytes:
        """The JSON body for one request (exposed so callers can log or size it)."""
        if output_tokens < 1:
            raise ValueError(f"output_tokens must be at least 1; got {output_tokens}")
        body: dict[str, Any] = {}
        if self._model is not None:
            body["model"] = self._model
        if self.config.api == "chat":
            if messages is None:
                if prompt_text is None:
                    raise ValueError("a chat request needs messages or prompt_text")
                messages = [{"role": "user", "content": prompt_text}]
            body["messages"] = messages
        else:
            if prompt_text is None:
                raise ValueError("a completions request needs prompt_text (messages are for api='chat')")
            body["prompt"] = prompt_text
        body["max_tokens"] = output_tokens
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if self.config.ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = output_tokens
        body.update(self.config.extra_body)
        return orjson.dumps(body)

    async def send(
        self,
        prompt_text: str | None,
        messages: list[dict[str, Any]] | None,
        output_tokens: int,
        record: RequestRecord,
        *,
        on_token: TokenCounter | None = None,
    ) -> RequestRecord:
        """Send one streamed request and fill ``record`` in place; request-level faults never raise.

        ``on_token.tokens`` (when given) is incremented as each content chunk arrives, for live rates.

        ``ValueError`` for a request that cannot be built (no prompt, ``output_tokens`` < 1) and
        ``RuntimeError`` outside ``async with`` are the caller's bugs, not the server's faults.
        """
        session, fresh = self._sessions()
        body = self.build_body(prompt_text, messages, output_tokens)
        record.output_tokens_requested = output_tokens
        loop = asyncio.get_running_loop()
        record.sent_ns = self._now()
        t0 = loop.time()
        first_deadline = t0 + self.config.first_token_timeout_s
        total_deadline = t0 + self.config.total_timeout_s
        if await self._attempt(session, body, record, first_deadline, total_deadline, on_token, may_retry=True):
            record.retries += 1
            await self._attempt(fresh, body, record, first_deadline, total_deadline, on_token, may_retry=False)
        return record

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        body: bytes,
        record: RequestRecord,
        first_deadline: float,
        total_deadline: float,
        on_token: TokenCounter | None,
        *,
        may_retry: bool,
    ) -> bool:
        """One try; returns True (record untouched) when it should be retried on a fresh connection."""
        loop = asyncio.get_running_loop()
        trace = _TraceCtx()
        acc: StreamAccumulator | None = None
        got_headers = False
        timer = asyncio.timeout_at(min(first_deadline, total_deadline))
        try:
            async with timer, session.post(self._url, data=body, trace_request_ctx=trace) as resp:
                got_headers = True
                record.first_byte_ns = self._now()
                record.http_status = resp.status
                if not 200 <= resp.status < 300:
                    await self._read_http_error(resp, record)
                    record.end_ns = self._now()
                    return False
                if resp.content_type == "application/json":
                    await self._read_unstreamed(resp, record)
                    record.end_ns = self._now()
                    return False
                acc = StreamAccumulator(record, self.config.api, self.anchor_ns, counter=on_token)
                waiting_first = True
                waiting_done = True
                async for data in resp.content.iter_any():
                    acc.feed(data)
                    if acc.failed:
                        break
                    if waiting_first and record.first_token_ns >= 0:
                        waiting_first = False
                        timer.reschedule(total_deadline)
                    if waiting_done and acc.done:
                        waiting_done = False
                        timer.reschedule(min(total_deadline, loop.time() + DONE_GRACE_S))
                record.end_ns = self._now()
                acc.finish()
                return False
        except TimeoutError as exc:
            now = self._now()
            if acc is not None and acc.done and timer.expired():
                # [DONE] arrived but the body never ended: the answer is whole, only the connection is lost.
                record.end_ns = acc.done_ns
                acc.finish()
                return False
            record.end_ns = now
            if record.error is not ErrorClass.OK:  # an HTTP error whose body was still being read
                record.error_detail = truncate(record.error_detail + " (error body not received in time)")
                return False
            if timer.expired():
                self._classify_deadline(record, got_headers, first_deadline <= total_deadline)
            else:
                cls, detail = classify_exception(
                    exc,
                    got_headers=got_headers,
                    chunks=record.output_chunks,
                    connect_timeout_s=self.config.connect_timeout_s,
                )
                self._fail(record, cls, detail)
            return False
        except (aiohttp.ClientError, OSError) as exc:
            if may_retry and not got_headers and trace.reused and is_stale_connection_error(exc):
                record.first_byte_ns = -1
                record.http_status = None
                return True
            if acc is not None and acc.done and not acc.failed:
                # Dropped after [DONE]: the answer is whole; only the connection's end was lost.
                record.end_ns = acc.done_ns
                acc.finish()
                return False
            record.end_ns = self._now()
            cls, detail = classify_exception(
                exc,
                got_headers=got_headers,
                chunks=record.output_chunks,
                connect_timeout_s=self.config.connect_timeout_s,
            )
            if record.retries:
                detail = truncate(detail + " (on the retry after a stale keep-alive connection)")
            self._fail(record, cls, detail)
            return False

    def _classify_deadline(self, record: RequestRecord, got_headers: bool, first_is_earlier: bool) -> None:
        cfg = self.config
        if record.first_token_ns < 0 and first_is_earlier:
            stage = "after the response headers" if got_headers else "and no response headers"
            self._fail(
                record,
                ErrorClass.TIMEOUT_FIRST_TOKEN,
                f"no output content within {cfg.first_token_timeout_s:g} s of the send, {stage}",
            )
        else:
            self._fail(
                record,
                ErrorClass.TIMEOUT_TOTAL,
                f"response not complete within {cfg.total_timeout_s:g} s of the send "
                f"({record.output_chunks} content chunks received)",
            )

    @staticmethod
    def _fail(record: RequestRecord, cls: ErrorClass, detail: str) -> None:
        record.error = cls
        record.error_detail = truncate(detail)

    async def _read_http_error(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        cls = ErrorClass.HTTP_4XX if 400 <= resp.status < 500 else ErrorClass.HTTP_5XX
        if resp.status < 400:
            cls = ErrorClass.MALFORMED
        self._fail(record, cls, f"HTTP {resp.status}")
        body = await _read_limited(resp, ERROR_BODY_LIMIT)
        message = error_body_message(body)
        if message:
            self._fail(record, cls, f"HTTP {resp.status}: {message}")

    async def _read_unstreamed(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        """A 200 ``application/json`` answer to a streamed request: an error object, or a server that
        ignores ``stream: true`` (no TTFT can be measured from it)."""
        body = await _read_limited(resp, JSON_BODY_LIMIT)
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and (obj.get("error") is not None or obj.get("object") == "error"):
            cls, message = error_object_class(obj.get("error"), obj)
            self._fail(record, cls, f"200 carrying error object: {message}")
            return
        self._fail(
            record,
            ErrorClass.MALFORMED,
            "expected an SSE stream (text/event-stream) but got a plain application/json answer: "
            "the server ignored stream=true, so no time to first token can be measured",
        )

    async def check_target(self) -> str:
        """Check that the target answers, and return the model name requests will carry.

        GET ``/v1/models`` (falling back to ``/health`` where there is no listing). Returns the
        configured model, else the first listed one (and uses it from then on). Raises
        ``TargetUnreachable``, ``TargetAuthError``, ``TargetHTTPError`` or ``TargetProtocolError``
        with a message that says what to do.
        """
        session, _ = self._sessions()
        root = self.config.base_url
        try:
            status, body = await self._get(session, self.config.models_url)
            if status in (404, 405):
                h_status, h_body = await self._get(session, self.config.health_url)
                if h_status >= 400:
                    raise _http_target_error(self.config.health_url, h_status, h_body)
                if self._model is None:
                    raise TargetProtocolError(
                        f"{root} has no /v1/models listing (HTTP {status}), so the model name is unknown: "
                        "pass --model NAME"
                    )
                return self._model
            if status >= 400:
                raise _http_target_error(self.config.models_url, status, body)
        except aiohttp.ConnectionTimeoutError as exc:
            raise TargetUnreachable(
                f"cannot connect to {root}: no TCP connection within {self.config.connect_timeout_s:g} s. "
                "Is the server running and reachable? Check --url."
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise TargetUnreachable(
                f"cannot connect to {root}: {os_reason(exc)}. Is the server running? Check --url."
            ) from exc
        except TimeoutError as exc:
            raise TargetProtocolError(
                f"{root} accepted the connection but did not answer GET /v1/models within "
                f"{CHECK_ANSWER_TIMEOUT_S:g} s: is it overloaded or not an HTTP server?"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            reason = os_reason(exc) if isinstance(exc, OSError) else (str(exc) or type(exc).__name__)
            raise TargetProtocolError(
                f"{root} accepted the connection but the exchange failed: {reason}. "
                "Is it an HTTP (not HTTPS) server, and an OpenAI-compatible one?"
            ) from exc
        ids = _model_ids(body)
        if ids is None:
            seen = truncate(body.decode("utf-8", errors="replace"), 200)
            raise TargetProtocolError(
                f"{self.config.models_url} did not answer with an OpenAI model list ({seen!r}): "
                "is --url an OpenAI-compatible server?"
            )
        if self._model is not None:
            return self._model
        if not ids:
            raise TargetProtocolError(f"{self.config.models_url} lists no models: pass --model NAME")
        self._model = ids[0]
        return ids[0]

    async def _get(self, session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
        timeout = aiohttp.ClientTimeout(total=CHECK_ANSWER_TIMEOUT_S, sock_connect=self.config.connect_timeout_s)
        async with session.get(url, timeout=timeout) as resp:
            return resp.status, await _read_limited(resp, JSON_BODY_LIMIT)


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for data in resp.content.iter_any():
        parts.append(data)
        size += len(data)
        if size >= limit:
            break
    return b"".join(parts)[:limit]


def _http_target_error(url: str, status: int, body: bytes) -> TargetHTTPError:
    message = truncate(error_body_message(body), 300)
    if status in (401, 403):
        return TargetAuthError(
            f"{url} rejected the request (HTTP {status}: {message}): the API key is missing or wrong; "
            "pass --api-key (or set the key the server expects)",
            status=status,
            detail=message,
        )
    return TargetHTTPError(f"{url} answered HTTP {status}: {message}", status=status, detail=message)


def _model_ids(body: bytes) -> list[str] | None:
    """Model ids of an OpenAI ``/v1/models`` answer, or None when the body is not one."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        return None
    return [str(m["id"]) for m in obj["data"] if isinstance(m, dict) and m.get("id")]
