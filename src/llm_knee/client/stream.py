"""Turning one streamed OpenAI response into the token and outcome fields of its RequestRecord.

Pure with respect to I/O: bytes and a clock go in, the record is filled. The hot path per content
chunk is one ``orjson.loads``, one clock read and one ``int`` appended to ``itl_ns``.

What counts:
- a *content chunk* is an event whose choices carry non-empty ``text`` (completions) or non-empty
  ``delta.content`` / ``delta.reasoning_content`` (chat); it is timestamped once, however many
  choices it has;
- events with empty ``choices`` (the chat usage event, role-only deltas) count no token;
- ``usage`` (any event; the last one wins) gives the server's token counts;
- an event holding an ``error`` object (or ``"object": "error"``) ends the request as ``http_4xx``
  when its code is a 4xx, else ``http_5xx``, though the HTTP status was 200;
- a data line that is not JSON, not a JSON object, or not UTF-8 is ``malformed``;
- at the end, no content at all, or fewer output tokens than requested (by usage when present, else
  by counting content chunks) is ``incomplete``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from llm_knee.client.sse import DONE, SSEError, SSEParser
from llm_knee.records.schema import ErrorClass, RequestRecord

DETAIL_LIMIT = 500
_SNIPPET = 120
_CLIENT_ERROR_TYPES = (
    "invalid_request",
    "badrequest",
    "bad_request",
    "not_found",
    "notfound",
    "rate_limit",
    "authentication",
    "permission",
    "context_length",
)


class TokenCounter(Protocol):
    """Anything with a ``tokens`` count the client bumps per content chunk (live progress, rate windows)."""

    tokens: int


def truncate(text: str, limit: int = DETAIL_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _snippet(data: bytes) -> str:
    return repr(data[:_SNIPPET])[2:-1] + ("…" if len(data) > _SNIPPET else "")


def error_object_class(err: Any, envelope: dict[str, Any]) -> tuple[ErrorClass, str]:
    """Class and message of an OpenAI-style error object (``{"message", "type", "code"}``)."""
    if isinstance(err, dict):
        message = err.get("message", err)
        code: Any = err.get("code", envelope.get("code"))
        kind = str(err.get("type", ""))
    else:
        message = err if err is not None else envelope.get("message", envelope)
        code = envelope.get("code")
        kind = str(envelope.get("type", ""))
    status: int | None = None
    if isinstance(code, int) and not isinstance(code, bool):
        status = code
    elif isinstance(code, str) and code.isdigit():
        status = int(code)
    if status is not None:
        cls = ErrorClass.HTTP_4XX if 400 <= status < 500 else ErrorClass.HTTP_5XX
    else:
        lowered = (kind + " " + str(code or "")).lower()
        client_side = any(word in lowered for word in _CLIENT_ERROR_TYPES)
        cls = ErrorClass.HTTP_4XX if client_side else ErrorClass.HTTP_5XX
    text = message if isinstance(message, str) else orjson.dumps(message).decode()
    label = f"code {code}: " if code is not None else ""
    return cls, label + text


class StreamAccumulator:
    """Consumes the body of one streamed response and fills ``record`` in place.

    ``feed`` each network chunk; stop reading when ``failed`` is set; after end of stream (or once
    ``done`` is set and the connection is idle) call ``finish``.
    """

    __slots__ = ("_anchor", "_api_chat", "_clock", "_counter", "_parser", "_record", "done", "done_ns", "failed")

    def __init__(
        self,
        record: RequestRecord,
        api: str,
        anchor_ns: int,
        clock: Callable[[], int] = time.perf_counter_ns,
        counter: TokenCounter | None = None,
    ) -> None:
        self._record = record
        self._counter = counter
        self._api_chat = api == "chat"
        self._anchor = anchor_ns
        self._clock = clock
        self._parser = SSEParser()
        self.done = False  # the [DONE] sentinel arrived
        self.done_ns = -1
        self.failed = False  # the record carries an error; stop reading

    @property
    def first_token_seen(self) -> bool:
        return self._record.first_token_ns >= 0

    def feed(self, data: bytes) -> None:
        if self.failed or self.done:
            return
        try:
            events = self._parser.feed(data)
        except SSEError as exc:
            self._fail(ErrorClass.MALFORMED, f"undecodable SSE stream: {exc}")
            return
        for payload in events:
            self._event(payload)
            if self.failed or self.done:
                return

    def finish(self) -> None:
        """Classify what arrived once the stream is over (without an error already recorded)."""
        if self.failed:
            return
        if not self.done:
            for payload in self._parser.flush():
                self._event(payload)
                if self.failed:
                    return
        rec = self._record
        if rec.output_chunks == 0:
            how = "with [DONE]" if self.done else "without [DONE]"
            self._fail(ErrorClass.INCOMPLETE, f"stream ended {how} and carried no output content")
            return
        if rec.output_tokens_server is not None:
            got, source = rec.output_tokens_server, "usage.completion_tokens"
        else:
            got, source = rec.output_chunks, "content chunks counted, no usage"
        if got < rec.output_tokens_requested:
            tail = "" if self.done else "; stream ended without [DONE]"
            self._fail(
                ErrorClass.INCOMPLETE,
                f"{got} of {rec.output_tokens_requested} output tokens ({source}){tail}",
            )

    def _fail(self, cls: ErrorClass, detail: str) -> None:
        self.failed = True
        self._record.error = cls
        self._record.error_detail = truncate(detail)

    def _event(self, payload: bytes) -> None:
        if payload == DONE:
            self.done = True
            self.done_ns = self._clock() - self._anchor
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            try:
                payload.decode("utf-8")
            except UnicodeDecodeError as exc:
                self._fail(ErrorClass.MALFORMED, f"invalid UTF-8 in data line ({exc.reason}): {_snippet(payload)}")
            else:
                self._fail(ErrorClass.MALFORMED, f"non-JSON data line: {_snippet(payload)}")
            return
        if type(obj) is not dict:
            self._fail(ErrorClass.MALFORMED, f"data line is JSON but not an object: {_snippet(payload)}")
            return
        err = obj.get("error")
        if err is not None or obj.get("object") == "error":
            cls, message = error_object_class(err, obj)
            self._fail(cls, f"200 carrying error object: {message}")
            return
        choices = obj.get("choices")
        if choices:
            if type(choices) is not list:
                self._fail(ErrorClass.MALFORMED, f"'choices' is not a list: {_snippet(payload)}")
                return
            if self._has_content(choices):
                self._token()
        usage = obj.get("usage")
        if usage and type(usage) is dict:
            completion = usage.get("completion_tokens")
            if type(completion) is int:
                self._record.output_tokens_server = completion
            prompt = usage.get("prompt_tokens")
            if type(prompt) is int:
                self._record.prompt_tokens_server = prompt
            # OpenAI's prompt_tokens_details.cached_tokens (vLLM, llama.cpp): prompt-cache hits show per request.
            details = usage.get("prompt_tokens_details")
            if type(details) is dict and type(cached := details.get("cached_tokens")) is int:
                self._record.prompt_tokens_cached = cached

    def _has_content(self, choices: list[Any]) -> bool:
        for choice in choices:
            if type(choice) is not dict:
                continue
            if self._api_chat:
                delta = choice.get("delta")
                if type(delta) is dict and (delta.get("content") or delta.get("reasoning_content")):
                    return True
            elif choice.get("text"):
                return True
        return False

    def _token(self) -> None:
        rec = self._record
        now = self._clock() - self._anchor
        if rec.first_token_ns < 0:
            rec.first_token_ns = now
        else:
            rec.itl_ns.append(now - rec.last_token_ns)
        rec.last_token_ns = now
        rec.output_chunks += 1
        if self._counter is not None:
            self._counter.tokens += 1
