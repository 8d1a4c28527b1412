"""Client self-check: how late the load process's event loop runs its callbacks.

A probe task sleeps a fixed interval and records by how much it overslept. When the loop is busy
(parsing SSE, building prompts, a blocking call) every timestamp the load generator takes is late by
about that much, so a high lag means the level's latencies describe the client, not the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.source import Clock, SourceStatus, StatusReporter

logger = logging.getLogger(__name__)


class LoopLagSampler:
    """Measures event-loop lag every ``probe_interval_s`` in the loop that calls ``open``.

    Each probe becomes one sample with its own timestamp, so per-level percentiles of the lag are
    exact rather than percentiles of per-tick maxima. ``sample`` hands over the probes taken since
    the previous call.
    """

    source = "client"

    def __init__(self, probe_interval_s: float = 0.1, *, max_buffered: int = 100_000) -> None:
        if probe_interval_s <= 0:
            raise ValueError(f"probe_interval_s must be > 0, got {probe_interval_s}")
        self._interval_ns = int(probe_interval_s * 1e9)
        self._interval_s = probe_interval_s
        self._max_buffered = max_buffered
        self._lags: list[tuple[int, float]] = []
        self._dropped = 0
        self._task: asyncio.Task[None] | None = None
        self._labels = {"pid": str(os.getpid())}
        self._status = StatusReporter(self.source, logger)

    @property
    def unavailable_reason(self) -> str | None:
        return self._status.unavailable_reason

    def status(self) -> SourceStatus:
        return self._status.status

    async def open(self, clock: Clock) -> SourceStatus:
        if self._task is None:
            self._task = asyncio.create_task(self._probe(clock), name="telemetry-loop-lag")
        return self._status.available(f"probing every {self._interval_s * 1000:g} ms in pid {os.getpid()}")

    async def _probe(self, clock: Clock) -> None:
        while True:
            start = time.perf_counter_ns()
            await asyncio.sleep(self._interval_s)
            lag_ns = max(0, time.perf_counter_ns() - start - self._interval_ns)
            if len(self._lags) < self._max_buffered:
                self._lags.append((clock(), lag_ns / 1e6))
            else:
                self._dropped += 1  # nobody is draining; keep memory bounded

    async def sample(self, clock: Clock) -> list[TelemetrySample]:
        lags, self._lags = self._lags, []
        if self._dropped:
            logger.warning("telemetry client: %d loop-lag probes dropped (sampler not drained)", self._dropped)
            self._dropped = 0
        return [TelemetrySample(t, self.source, names.CLIENT_LOOP_LAG_MS, lag, dict(self._labels)) for t, lag in lags]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
