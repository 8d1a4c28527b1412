"""Server telemetry from the engine's Prometheus ``/metrics`` page, normalised across engines.

vLLM, SGLang, TGI and llama.cpp each name the same few quantities differently; one table per
engine (``ENGINE_MAPS``) maps them onto our names in :mod:`llm_knee.telemetry.names`. The engine is
recognised from the metric names it exports unless the caller names it. Histograms are kept as their
running sum and count, so a level's mean server-side TTFT is delta(sum) / delta(count).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.source import Clock, SourceStatus, StatusReporter

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MetricMap:
    """Our metric ``name`` from the first of ``candidates`` the server exports, over its label sets."""

    name: str
    candidates: tuple[str, ...]
    # Label sets are engines / models of one server: counts add up, fractions average.
    aggregate: Literal["sum", "mean"] = "sum"


def _histogram(ours_sum: str, ours_count: str, *theirs: str) -> tuple[MetricMap, MetricMap]:
    return (
        MetricMap(ours_sum, tuple(f"{t}_sum" for t in theirs)),
        MetricMap(ours_count, tuple(f"{t}_count" for t in theirs)),
    )


ENGINE_PREFIXES: dict[str, str] = {"vllm": "vllm:", "sglang": "sglang:", "tgi": "tgi_", "llamacpp": "llamacpp:"}

ENGINE_MAPS: dict[str, tuple[MetricMap, ...]] = {
    "vllm": (
        MetricMap(names.SERVER_REQUESTS_RUNNING, ("vllm:num_requests_running",)),
        MetricMap(names.SERVER_REQUESTS_WAITING, ("vllm:num_requests_waiting",)),
        # vLLM's "perc" gauges are fractions 0..1; the name changed in v0.10.
        MetricMap(names.SERVER_KV_USAGE, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "mean"),
        MetricMap(names.SERVER_PREEMPTIONS_TOTAL, ("vllm:num_preemptions_total",)),
        MetricMap(names.SERVER_PROMPT_TOKENS_TOTAL, ("vllm:prompt_tokens_total",)),
        MetricMap(names.SERVER_GENERATION_TOKENS_TOTAL, ("vllm:generation_tokens_total",)),
        *_histogram(names.SERVER_TTFT_SUM, names.SERVER_TTFT_COUNT, "vllm:time_to_first_token_seconds"),
        *_histogram(
            names.SERVER_ITL_SUM,
            names.SERVER_ITL_COUNT,
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ),
        *_histogram(names.SERVER_E2E_SUM, names.SERVER_E2E_COUNT, "vllm:e2e_request_latency_seconds"),
        *_histogram(names.SERVER_QUEUE_TIME_SUM, names.SERVER_QUEUE_TIME_COUNT, "vllm:request_queue_time_seconds"),
    ),
    "sglang": (
        MetricMap(names.SERVER_REQUESTS_RUNNING, ("sglang:num_running_reqs",)),
        MetricMap(names.SERVER_REQUESTS_WAITING, ("sglang:num_queue_reqs",)),
        MetricMap(names.SERVER_KV_USAGE, ("sglang:token_usage",), "mean"),
        MetricMap(names.SERVER_PROMPT_TOKENS_TOTAL, ("sglang:prompt_tokens_total",)),
        MetricMap(names.SERVER_GENERATION_TOKENS_TOTAL, ("sglang:generation_tokens_total",)),
        *_histogram(names.SERVER_TTFT_SUM, names.SERVER_TTFT_COUNT, "sglang:time_to_first_token_seconds"),
        *_histogram(
            names.SERVER_ITL_SUM,
            names.SERVER_ITL_COUNT,
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        *_histogram(names.SERVER_E2E_SUM, names.SERVER_E2E_COUNT, "sglang:e2e_request_latency_seconds"),
        *_histogram(names.SERVER_QUEUE_TIME_SUM, names.SERVER_QUEUE_TIME_COUNT, "sglang:queue_time_seconds"),
    ),
    "tgi": (
        MetricMap(names.SERVER_REQUESTS_RUNNING, ("tgi_batch_current_size",)),
        MetricMap(names.SERVER_REQUESTS_WAITING, ("tgi_queue_size",)),
        MetricMap(names.SERVER_GENERATION_TOKENS_TOTAL, ("tgi_request_generated_tokens_sum",)),
        MetricMap(names.SERVER_PROMPT_TOKENS_TOTAL, ("tgi_request_input_length_sum",)),
        *_histogram(names.SERVER_QUEUE_TIME_SUM, names.SERVER_QUEUE_TIME_COUNT, "tgi_request_queue_duration"),
        *_histogram(names.SERVER_E2E_SUM, names.SERVER_E2E_COUNT, "tgi_request_duration"),
        *_histogram(names.SERVER_TPOT_SUM, names.SERVER_TPOT_COUNT, "tgi_request_mean_time_per_token_duration"),
    ),
    "llamacpp": (
        MetricMap(names.SERVER_REQUESTS_RUNNING, ("llamacpp:requests_processing",)),
        MetricMap(names.SERVER_REQUESTS_WAITING, ("llamacpp:requests_deferred",)),
        MetricMap(names.SERVER_KV_USAGE, ("llamacpp:kv_cache_usage_ratio",), "mean"),  # older builds only
        MetricMap(names.SERVER_PROMPT_TOKENS_TOTAL, ("llamacpp:prompt_tokens_total",)),
        MetricMap(names.SERVER_GENERATION_TOKENS_TOTAL, ("llamacpp:tokens_predicted_total",)),
        MetricMap(names.SERVER_BUSY_SLOTS_PER_DECODE, ("llamacpp:n_busy_slots_per_decode",), "mean"),
    ),
}

ENGINE_NAMES: dict[str, str] = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "llamacpp": "llama.cpp"}

ParsedMetrics = dict[str, list[tuple[dict[str, str], float]]]


def parse_metrics_text(text: str) -> ParsedMetrics:
    """Every sample of a Prometheus text page, by sample name (``_sum``/``_count``/``_bucket`` kept apart).

    Raises ``ValueError`` when the text is not Prometheus exposition format.
    """
    out: ParsedMetrics = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def detect_engine(sample_names: Iterable[str]) -> str | None:
    """The engine whose prefix most exported names carry; None when none of ours is present."""
    counts = dict.fromkeys(ENGINE_PREFIXES, 0)
    for n in sample_names:
        for engine, prefix in ENGINE_PREFIXES.items():
            if n.startswith(prefix):
                counts[engine] += 1
    best = max(counts, key=lambda e: counts[e])
    return best if counts[best] > 0 else None


def _lookup(parsed: Mapping[str, list[tuple[dict[str, str], float]]], name: str) -> list[float] | None:
    # The client parser renames counters to end in "_total" (TGI's have no suffix), so try both spellings.
    alt = name[: -len("_total")] if name.endswith("_total") else name + "_total"
    for key in (name, alt):
        if key in parsed:
            values = [v for _, v in parsed[key] if not math.isnan(v)]
            return values or None
    return None


def normalise(parsed: Mapping[str, list[tuple[dict[str, str], float]]], engine: str) -> dict[str, float]:
    """Our metric names and values for one scraped page of ``engine``; absent metrics are left out."""
    out: dict[str, float] = {}
    for m in ENGINE_MAPS[engine]:
        for candidate in m.candidates:
            values = _lookup(parsed, candidate)
            if values is not None:
                out[m.name] = sum(values) if m.aggregate == "sum" else sum(values) / len(values)
                break
    return out


def metrics_url(base_url: str) -> str:
    """``<server root>/metrics`` from a server or OpenAI base URL (``http://h:p/v1`` → ``http://h:p/metrics``)."""
    url = base_url.rstrip("/")
    if url.endswith("/metrics"):
        return url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url + "/metrics"


class ServerMetricsSampler:
    """Scrapes ``/metrics`` at every tick and emits the engine's quantities under our names.

    A failed scrape (server restarting, no ``/metrics``) marks the source unavailable with the reason
    and is retried at the next tick; each distinct reason is logged once. The scrape uses its own
    connection, closed after every request, so it does not hold a slot among the connections counted
    to the target.
    """

    source = "server"

    def __init__(
        self,
        base_url: str,
        *,
        engine: str | None = None,
        timeout_s: float = 2.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if engine is not None and engine not in ENGINE_MAPS:
            raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINE_MAPS)} (or None to detect)")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.url = metrics_url(base_url)
        self._engine = engine
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._session = session
        self._own_session = session is None
        self._status = StatusReporter(self.source, logger)

    @property
    def engine(self) -> str | None:
        """The engine key (``vllm``, ``sglang``, ``tgi``, ``llamacpp``) once known."""
        return self._engine

    @property
    def unavailable_reason(self) -> str | None:
        return self._status.unavailable_reason

    def status(self) -> SourceStatus:
        return self._status.status

    async def open(self, clock: Clock) -> SourceStatus:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=1))
        await self.sample(clock)
        return self._status.status

    async def _scrape(self) -> str | None:
        assert self._session is not None
        try:
            async with self._session.get(self.url, timeout=self._timeout) as resp:
                body = await resp.text()
                if resp.status != 200:
                    hint = (
                        " (llama.cpp serves it only when started with --metrics)" if resp.status in (404, 501) else ""
                    )
                    self._status.unavailable(f"GET {self.url} answered HTTP {resp.status}{hint}")
                    return None
                return body
        except TimeoutError:
            self._status.unavailable(f"GET {self.url} got no answer within {self._timeout_s:g} s")
        except aiohttp.ClientError as exc:
            self._status.unavailable(f"cannot scrape {self.url}: {exc.__class__.__name__}: {exc}")
        return None

    async def sample(self, clock: Clock) -> list[TelemetrySample]:
        if self._session is None:
            return []
        t_start = clock()
        mono_start = time.perf_counter_ns()
        body = await self._scrape()
        if body is None:
            return []
        # The page describes the server somewhere within the request: stamp it at the midpoint.
        t_ns = t_start + (time.perf_counter_ns() - mono_start) // 2
        try:
            parsed = parse_metrics_text(body)
        except ValueError as exc:
            self._status.unavailable(f"{self.url} is not Prometheus text: {exc}")
            return []
        if self._engine is None:
            self._engine = detect_engine(parsed)
            if self._engine is None:
                self._status.unavailable(
                    f"no vLLM, SGLang, TGI or llama.cpp metrics at {self.url} ({len(parsed)} other names)"
                )
                return []
        values = normalise(parsed, self._engine)
        if not values:
            self._status.unavailable(f"{self.url} exports none of the {ENGINE_NAMES[self._engine]} metrics we read")
            return []
        self._status.available(f"{ENGINE_NAMES[self._engine]} at {self.url}")
        return [TelemetrySample(t_ns, self.source, name, value) for name, value in values.items()]

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None
