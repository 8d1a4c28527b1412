"""Runs the telemetry samplers beside the load, each as its own asyncio task, on the records' clock.

Usage (the caller owns where samples go)::

    collector = TelemetryCollector(default_samplers(base_url="http://127.0.0.1:8000/v1"), sink=store.append,
                                   anchor_ns=session_anchor_ns)
    await collector.start()
    ...  # run the levels
    await collector.stop()

Each sampler ticks at ``interval_s`` independently, so a slow ``/metrics`` scrape never delays the
GPU readings. A tick that falls behind is skipped rather than bunched up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from urllib.parse import urlsplit

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry.client import LoopLagSampler
from llm_knee.telemetry.gpu import GpuSampler, NvmlBackend
from llm_knee.telemetry.host import HostSampler
from llm_knee.telemetry.server import ServerMetricsSampler
from llm_knee.telemetry.source import Sampler, SourceStatus

logger = logging.getLogger(__name__)

Sink = Callable[[TelemetrySample], None]


class TelemetryCollector:
    """Samples every source at ``interval_s`` (default 1 Hz) and passes each sample to ``sink``.

    Times are ``perf_counter_ns() - anchor_ns``: give the session's anchor so samples and request
    records share one clock. An error raised by ``sink`` (e.g. a full disk) stops collection and is
    raised again from ``stop()``; a sampler that fails is logged once and keeps being tried.
    """

    def __init__(
        self,
        samplers: Sequence[Sampler],
        sink: Sink,
        *,
        interval_s: float = 1.0,
        anchor_ns: int | None = None,
        session: int = 0,
        perf_counter_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        sources = [s.source for s in samplers]
        duplicated = sorted({s for s in sources if sources.count(s) > 1})
        if duplicated:
            raise ValueError(f"more than one sampler for source {duplicated}; give each source once")
        self._samplers = list(samplers)
        self._sink = sink
        self._interval_s = interval_s
        self._perf_counter_ns = perf_counter_ns
        self._anchor_ns = perf_counter_ns() if anchor_ns is None else anchor_ns
        self._session = session
        self._tasks: list[asyncio.Task[None]] = []
        self._sink_error: BaseException | None = None
        self._failures: set[str] = set()
        self._broken: dict[str, SourceStatus] = {}  # samplers whose open() itself raised
        self._started = False

    @property
    def anchor_ns(self) -> int:
        return self._anchor_ns

    @property
    def interval_s(self) -> float:
        return self._interval_s

    def clock(self) -> int:
        """Nanoseconds since the anchor: the time base of every sample."""
        return self._perf_counter_ns() - self._anchor_ns

    def statuses(self) -> dict[str, SourceStatus]:
        """Each source's current status, by source name."""
        return {s.source: self._broken.get(s.source) or s.status() for s in self._samplers}

    @property
    def available_sources(self) -> list[str]:
        return [source for source, status in self.statuses().items() if status.available]

    async def start(self) -> dict[str, SourceStatus]:
        """Probe every source once (concurrently), then start sampling; returns what was found."""
        if self._started:
            raise RuntimeError("TelemetryCollector.start() called twice")
        self._started = True
        opened = await asyncio.gather(*(s.open(self.clock) for s in self._samplers), return_exceptions=True)
        for sampler, result in zip(self._samplers, opened, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancellation, KeyboardInterrupt: not a source problem
                reason = f"failed to open: {type(result).__name__}: {result}"
                self._broken[sampler.source] = SourceStatus(sampler.source, available=False, reason=reason)
                logger.warning("telemetry %s unavailable: %s", sampler.source, reason)
        self._tasks = [
            asyncio.create_task(self._run(s), name=f"telemetry-{s.source}")
            for s in self._samplers
            if s.source not in self._broken
        ]
        return self.statuses()

    async def stop(self) -> None:
        """Stop sampling, take one last reading from each source, close them; re-raise a sink error."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        try:
            if self._started and self._sink_error is None:
                # The last partial interval (and any loop-lag probes since the last tick) still count.
                for sampler in self._samplers:
                    if sampler.source not in self._broken:
                        await self._tick(sampler)
        finally:
            await asyncio.gather(*(s.close() for s in self._samplers), return_exceptions=True)
            self._started = False
        if self._sink_error is not None:
            raise self._sink_error

    async def __aenter__(self) -> TelemetryCollector:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _run(self, sampler: Sampler) -> None:
        loop = asyncio.get_running_loop()
        next_t = loop.time() + self._interval_s
        while self._sink_error is None:
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            await self._tick(sampler)
            next_t += self._interval_s
            if next_t < loop.time():
                next_t = loop.time() + self._interval_s

    async def _tick(self, sampler: Sampler) -> None:
        try:
            samples = await sampler.sample(self.clock)
        except Exception as exc:
            if sampler.source not in self._failures:
                self._failures.add(sampler.source)
                logger.warning("telemetry %s: sampling failed: %s: %s", sampler.source, type(exc).__name__, exc)
            logger.debug("telemetry %s: sampling failed", sampler.source, exc_info=True)
            return
        for s in samples:
            s.session = self._session
            try:
                self._sink(s)
            except Exception as exc:
                self._sink_error = exc
                return


def target_of(base_url: str) -> tuple[str, int]:
    """(host, port) of a server URL, with the scheme's default port when none is written."""
    parts = urlsplit(base_url)
    if parts.hostname is None:
        raise ValueError(f"server URL {base_url!r} has no host; expected e.g. http://127.0.0.1:8000/v1")
    port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    return parts.hostname, port


def default_samplers(
    *,
    base_url: str | None = None,
    gpu: bool = True,
    host: bool = True,
    server: bool = True,
    client: bool = True,
    engine: str | None = None,
    pids: Callable[[], Iterable[int]] | None = None,
    nvml_backend: NvmlBackend | None = None,
) -> list[Sampler]:
    """The standard set of samplers for a run against ``base_url`` (server and TCP need the URL)."""
    samplers: list[Sampler] = []
    if gpu:
        samplers.append(GpuSampler(nvml_backend))
    if host:
        samplers.append(HostSampler(target_of(base_url) if base_url else None, pids=pids))
    if server and base_url:
        samplers.append(ServerMetricsSampler(base_url, engine=engine))
    if client:
        samplers.append(LoopLagSampler())
    return samplers
