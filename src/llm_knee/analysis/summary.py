"""Per-level summary: one pure function from a level's records (and its measurement window) to figures.

Which records count for what:
- *Latency* figures (TTFT, TPOT, ITL, E2E, queueing) use the successful, non-warm-up records that were
  started (scheduled) inside the measurement window; each is followed to its end even after the window.
- *Throughput* figures use what happened inside the window, whoever started it: output tokens whose
  arrival time falls inside it (each request's chunk times, weighted by the server's token count when a
  chunk carries several tokens), completions whose end falls inside it (req/s), and prompt tokens of the
  requests whose first token arrived inside it (prefill tok/s). Only successful requests count, so a
  server that streams garbage does not look fast.
- *Error rate* is failed / all non-warm-up requests started in the window, per class.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llm_knee.analysis.slo import Objective
from llm_knee.analysis.stats import mean, percentile
from llm_knee.records.schema import ERROR_CLASSES, RequestRecord

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Window:
    """The measurement window of a level, ns on the session clock; ``session`` tells which clock."""

    start_ns: int
    end_ns: int
    session: int = 0

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end_ns - self.start_ns) / NS_PER_S)


@dataclass
class LevelSummary:
    level_index: int
    level: float
    mode: str  # "closed" (level = concurrency) or "open" (level = offered rate, req/s)
    window_s: float
    requests: int  # measured requests (non-warm-up, started in the window)
    ok: int
    errors: dict[str, int]
    error_rate: float
    req_s: float
    output_tok_s: float
    prefill_tok_s: float
    total_tok_s: float
    ttft_mean_ms: float | None
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    decode_tok_s_per_user_p50: float | None  # per request: output tokens after the first / decode time
    decode_tok_s_per_user_p10: float | None  # the slow users' experience
    queue_p50_ms: float | None  # client-side queueing (open loop: schedule -> send)
    queue_p99_ms: float | None
    mean_input_tokens: float | None
    mean_output_tokens: float | None
    retries: int
    prompt_cache_hit_rate: float | None = None  # cached / prompt tokens, where the server reports it
    goodput_req_s: float | None = None  # completions meeting every per-request SLO, per second
    slo_met: bool | None = None  # every SLO percentile within its limit
    slo_detail: dict[str, float | None] = field(default_factory=dict)
    # filled by the driver, not by the records
    steady: bool | None = None
    stop_reason: str = ""
    drain_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelSummary:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def _tokens_in_window(rec: RequestRecord, start: int, end: int) -> float:
    """Output tokens of ``rec`` that arrived inside [start, end)."""
    if rec.first_token_ns < 0 or rec.output_chunks == 0:
        return 0.0
    # Fast paths: the whole stream inside, or entirely outside, the window.
    if rec.first_token_ns >= start and rec.last_token_ns < end:
        return float(rec.output_tokens)
    if rec.last_token_ns < start or rec.first_token_ns >= end:
        return 0.0
    times = rec.first_token_ns + np.concatenate(([0], np.cumsum(np.asarray(rec.itl_ns, dtype=np.int64))))
    inside = int(np.count_nonzero((times >= start) & (times < end)))
    return inside * (rec.output_tokens / rec.output_chunks)


def _request_value_ms(rec: RequestRecord, metric: str) -> float | None:
    if metric == "ttft":
        return _ms(rec.ttft_ns)
    if metric == "tpot":
        return _ms(rec.tpot_ns)
    if metric == "e2e":
        return _ms(rec.e2e_ns)
    if metric == "itl":
        return _ms(max(rec.itl_ns)) if rec.itl_ns else None
    raise ValueError(f"unknown SLO metric {metric!r}")


def _cache_hit_rate(ok: Sequence[RequestRecord]) -> float | None:
    reported = [r for r in ok if r.prompt_tokens_cached is not None and r.input_tokens > 0]
    if not reported:
        return None
    return sum(r.prompt_tokens_cached or 0 for r in reported) / sum(r.input_tokens for r in reported)


def default_window(records: Sequence[RequestRecord]) -> Window | None:
    """When no window was recorded: from the first measured send to the last measured end."""
    measured = [r for r in records if not r.warmup and r.sent_ns >= 0]
    if not measured:
        return None
    start = min(r.scheduled_ns if r.scheduled_ns >= 0 else r.sent_ns for r in measured)
    end = max(r.end_ns for r in measured)
    return Window(start, max(end, start + 1), measured[0].session)


def summarize_level(
    records: Iterable[RequestRecord],
    *,
    level_index: int,
    level: float,
    mode: str,
    window: Window | None = None,
    slo: Sequence[Objective] = (),
) -> LevelSummary:
    recs = [r for r in records if r.level_index == level_index]
    if window is None:
        window = default_window(recs) or Window(0, 1)
    recs = [r for r in recs if r.session == window.session]
    w0, w1 = window.start_ns, window.end_ns
    seconds = window.seconds

    def started_in_window(r: RequestRecord) -> bool:
        t = r.scheduled_ns if r.scheduled_ns >= 0 else r.sent_ns
        return w0 <= t < w1

    measured = [r for r in recs if not r.warmup and started_in_window(r)]
    ok = [r for r in measured if r.ok]
    counts = Counter(r.error.value for r in measured if not r.ok)
    errors = {c.value: counts.get(c.value, 0) for c in ERROR_CLASSES}
    n_err = sum(errors.values())

    all_ok = [r for r in recs if r.ok]
    out_tokens = sum(_tokens_in_window(r, w0, w1) for r in all_ok)
    completions = sum(1 for r in all_ok if w0 <= r.end_ns < w1)
    prefill = sum(r.input_tokens for r in all_ok if w0 <= r.first_token_ns < w1)

    ttft = [r.ttft_ns for r in ok if r.ttft_ns is not None]
    tpot = [t for r in ok if (t := r.tpot_ns) is not None]
    e2e = [r.e2e_ns for r in ok if r.e2e_ns is not None]
    itl = np.concatenate([np.asarray(r.itl_ns, dtype=np.int64) for r in ok]) if ok else np.empty(0)
    # Decode speed a user sees: tokens after the first over the time they took.
    decode_speed = [1e9 / t for t in tpot if t > 0]
    queue = [r.queue_ns for r in measured if r.scheduled_ns >= 0]

    def pct(values: Sequence[float] | np.ndarray, q: float) -> float | None:
        return _ms(percentile(values, q))

    per_s = (lambda x: x / seconds) if seconds > 0 else (lambda x: 0.0)
    summary = LevelSummary(
        level_index=level_index,
        level=level,
        mode=mode,
        window_s=seconds,
        requests=len(measured),
        ok=len(ok),
        errors=errors,
        error_rate=(n_err / len(measured)) if measured else 0.0,
        req_s=per_s(completions),
        output_tok_s=per_s(out_tokens),
        prefill_tok_s=per_s(prefill),
        total_tok_s=per_s(out_tokens + prefill),
        ttft_mean_ms=_ms(mean(ttft)),
        ttft_p50_ms=pct(ttft, 50),
        ttft_p90_ms=pct(ttft, 90),
        ttft_p95_ms=pct(ttft, 95),
        ttft_p99_ms=pct(ttft, 99),
        tpot_p50_ms=pct(tpot, 50),
        tpot_p99_ms=pct(tpot, 99),
        itl_p50_ms=pct(itl, 50),
        itl_p99_ms=pct(itl, 99),
        e2e_p50_ms=pct(e2e, 50),
        e2e_p99_ms=pct(e2e, 99),
        decode_tok_s_per_user_p50=percentile(decode_speed, 50),
        decode_tok_s_per_user_p10=percentile(decode_speed, 10),
        queue_p50_ms=pct(queue, 50),
        queue_p99_ms=pct(queue, 99),
        mean_input_tokens=mean([r.input_tokens for r in ok]),
        mean_output_tokens=mean([r.output_tokens for r in ok]),
        retries=sum(r.retries for r in measured),
        prompt_cache_hit_rate=_cache_hit_rate(ok),
    )
    if slo:
        _apply_slo(summary, measured, slo, seconds)
    return summary


def _apply_slo(
    summary: LevelSummary,
    measured: list[RequestRecord],
    slo: Sequence[Objective],
    seconds: float,
) -> None:
    """A failed request has missed every objective: it enters each percentile as an infinitely slow
    request, so errors can never make a level look better than it is."""
    ok = [r for r in measured if r.ok]
    failed = len(measured) - len(ok)
    met_all = True
    detail: dict[str, float | None] = {}
    for obj in slo:
        values = [v for r in ok if (v := _request_value_ms(r, obj.metric)) is not None]
        values += [_NEVER] * failed
        p = percentile(values, obj.percentile)
        detail[str(obj)] = None if p is None or p >= _NEVER else p
        if p is None or p > obj.limit_ms:
            met_all = False
    good = 0
    for r in ok:
        vals = [_request_value_ms(r, o.metric) for o in slo]
        if all(v is not None and v <= o.limit_ms for v, o in zip(vals, slo, strict=True)):
            good += 1
    summary.goodput_req_s = good / seconds if seconds > 0 else 0.0
    summary.slo_met = met_all
    summary.slo_detail = detail


_NEVER = 1e15  # ms; stands for "never completed" inside percentiles
