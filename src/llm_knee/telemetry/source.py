"""The sampler seam: what every telemetry source provides, and how it says that it is absent.

A source that cannot be read (no NVIDIA driver, no /proc, a server without ``/metrics``) must not
stop a load test, and must not flood the log either: it reports why, once, as one warning line, and
keeps answering ``status()`` with the reason so the run's summary can say which sources were missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llm_knee.records.schema import TelemetrySample

Clock = Callable[[], int]
"""Returns nanoseconds since the session anchor (``perf_counter_ns() - anchor_ns``)."""


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Whether a source is being read; ``reason`` says why not, ``detail`` what was found."""

    source: str
    available: bool
    reason: str = ""
    detail: str = ""

    def describe(self) -> str:
        if self.available:
            return f"{self.source}: ok" + (f" ({self.detail})" if self.detail else "")
        return f"{self.source}: unavailable — {self.reason}"


@runtime_checkable
class Sampler(Protocol):
    """One telemetry source. ``open`` probes it once; ``sample`` is called at every tick."""

    source: str

    def status(self) -> SourceStatus: ...

    async def open(self, clock: Clock) -> SourceStatus: ...

    async def sample(self, clock: Clock) -> list[TelemetrySample]: ...

    async def close(self) -> None: ...


class StatusReporter:
    """Holds a source's current status and logs each distinct problem once, never a traceback."""

    def __init__(self, source: str, logger: logging.Logger) -> None:
        self._source = source
        self._logger = logger
        self._status = SourceStatus(source, available=False, reason="not opened yet")
        self._reported: set[str] = set()

    @property
    def status(self) -> SourceStatus:
        return self._status

    @property
    def unavailable_reason(self) -> str | None:
        return None if self._status.available else self._status.reason

    def available(self, detail: str = "") -> SourceStatus:
        if not self._status.available and self._reported:
            self._logger.info("telemetry %s: available again (%s)", self._source, detail or "ok")
        self._status = SourceStatus(self._source, available=True, detail=detail)
        return self._status

    def unavailable(self, reason: str) -> SourceStatus:
        # A flapping source (a server restarting) would otherwise log every second.
        if reason not in self._reported:
            self._reported.add(reason)
            self._logger.warning("telemetry %s unavailable: %s", self._source, reason)
        self._status = SourceStatus(self._source, available=False, reason=reason)
        return self._status
