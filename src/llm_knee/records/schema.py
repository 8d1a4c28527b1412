"""Record schemas.

Every figure llm-knee prints is a pure function of these records, so they carry everything needed to
recompute a summary later: times on one monotonic clock (nanoseconds since the run session's anchor),
token counts as the server reported them and as we counted them, and a classified error.

Times are ``int`` nanoseconds relative to the anchor of the *session* that produced the record (one
process run of ``knee find``; a resumed run is a new session). The anchor itself — a
``perf_counter_ns`` reading and the wall clock taken at the same instant — is stored once per session
in the run's spec, so wall-clock times can be reconstructed without ever mixing clocks in intervals.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

RECORD_SCHEMA_VERSION = 1


class ErrorClass(StrEnum):
    """Why a request did not count as a success. ``ok`` is the success class."""

    OK = "ok"
    REFUSED = "refused"  # TCP connection refused
    RESET = "reset"  # connection reset / closed by the peer before the response was complete
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"
    TIMEOUT_TOTAL = "timeout_total"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    INCOMPLETE = "incomplete"  # fewer output tokens than asked for, or no output at all
    MALFORMED = "malformed"  # undecodable SSE / JSON / UTF-8 from the server


ERROR_CLASSES: tuple[ErrorClass, ...] = tuple(c for c in ErrorClass if c is not ErrorClass.OK)


@dataclass(slots=True)
class RequestRecord:
    """One request, sent or simulated. Append-only; written before it is counted."""

    request_id: str
    level_index: int  # position of the level in the sweep (0-based)
    level: float  # the level's load value: concurrency (closed loop) or rate in req/s (open loop)
    session: int = 0  # which session (process run) produced it; resume starts a new one
    worker: int = 0  # virtual user (closed loop) or worker process id
    warmup: bool = False  # sent during a warm-up period: kept on disk, excluded from summaries
    # --- times, ns since the session anchor; -1 when the event did not happen ---
    scheduled_ns: int = -1  # when the load generator meant to send it (open loop: the schedule)
    sent_ns: int = -1  # just before the HTTP request was written
    first_byte_ns: int = -1  # response headers received
    first_token_ns: int = -1  # first chunk carrying output content
    last_token_ns: int = -1
    end_ns: int = -1  # stream closed / error raised
    itl_ns: list[int] = field(default_factory=list)  # gaps between successive content chunks
    # --- tokens ---
    prompt_tokens: int = 0  # what we built (exact with a tokenizer, approximate without)
    prompt_tokens_server: int | None = None  # usage.prompt_tokens when the server reports it
    prompt_tokens_cached: int | None = None  # usage.prompt_tokens_details.cached_tokens (prompt-cache hits)
    output_tokens_requested: int = 0
    output_chunks: int = 0  # content-bearing SSE chunks we saw
    output_tokens_server: int | None = None  # usage.completion_tokens when reported
    # --- outcome ---
    http_status: int | None = None
    error: ErrorClass = ErrorClass.OK
    error_detail: str = ""
    retries: int = 0  # retries on a fresh connection after a reused one failed before any byte

    @property
    def ok(self) -> bool:
        return self.error is ErrorClass.OK

    @property
    def output_tokens(self) -> int:
        """Best known output token count: the server's usage when given, else our chunk count."""
        return self.output_tokens_server if self.output_tokens_server is not None else self.output_chunks

    @property
    def input_tokens(self) -> int:
        return self.prompt_tokens_server if self.prompt_tokens_server is not None else self.prompt_tokens

    @property
    def ttft_ns(self) -> int | None:
        """Time to first token, from the *scheduled* send time (open loop) or the send (closed)."""
        if self.first_token_ns < 0:
            return None
        start = self.scheduled_ns if self.scheduled_ns >= 0 else self.sent_ns
        return self.first_token_ns - start

    @property
    def e2e_ns(self) -> int | None:
        if self.end_ns < 0:
            return None
        start = self.scheduled_ns if self.scheduled_ns >= 0 else self.sent_ns
        return self.end_ns - start

    @property
    def queue_ns(self) -> int:
        """Time spent waiting inside the client between the schedule and the actual send."""
        if self.scheduled_ns < 0 or self.sent_ns < 0:
            return 0
        return max(0, self.sent_ns - self.scheduled_ns)

    @property
    def tpot_ns(self) -> float | None:
        """Mean time per output token after the first (None with fewer than two tokens)."""
        n = self.output_tokens
        if n < 2 or self.first_token_ns < 0 or self.last_token_ns < 0:
            return None
        return (self.last_token_ns - self.first_token_ns) / (n - 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["error"] = ErrorClass(kwargs.get("error", "ok"))
        return cls(**kwargs)


@dataclass(slots=True)
class TelemetrySample:
    """One reading of one metric from one source, on the same clock as the records.

    ``source`` names the adapter ("gpu", "host", "server", "client", "engine"); ``name`` is our
    normalised metric name (e.g. ``gpu.power_w``, ``server.requests_waiting``); ``labels`` tell
    apart instances (GPU index, CPU core).
    """

    t_ns: int
    source: str
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)
    session: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TelemetrySample:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
