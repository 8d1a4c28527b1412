"""Event-loop lag: how late a timer fires, the delay every callback on this loop suffers.

A task sleeps ``interval_s`` again and again and records how much later than asked it woke up. The
figure includes the timer granularity of the loop (epoll and libuv wait in whole milliseconds), so an
idle loop already shows up to ~1 ms.

On a shared host part of the lag is the kernel not running this process at all (other processes hold
the core). Where Linux exposes it (/proc/thread-self/schedstat), the time this thread spent runnable
but waiting for a CPU during each interval is subtracted too, giving ``own`` percentiles: the lag this
process caused itself (its own work holding the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import IO, Protocol


class LagObserver(Protocol):
    """Anything with ``observe(seconds)``, e.g. a histogram exported on /metrics."""

    def observe(self, value: float) -> None: ...


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in [0, 100])."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task (if any) and wait for it to end, so none of it runs after the caller stops."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class LoopLagMonitor:
    def __init__(self, interval_s: float = 0.005, keep: int = 50_000) -> None:
        self.interval_s = interval_s
        self._samples: deque[float] = deque(maxlen=keep)  # seconds late
        self._own: deque[float] = deque(maxlen=keep)  # seconds late, minus time spent waiting for a CPU
        self._task: asyncio.Task[None] | None = None
        self.observers: list[LagObserver] = []

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag-monitor")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        interval = self.interval_s
        clock = time.perf_counter
        samples = self._samples
        own = self._own
        try:
            schedstat: IO[bytes] | None = open("/proc/thread-self/schedstat", "rb")  # noqa: SIM115
        except OSError:
            schedstat = None
        try:
            wait0 = _run_delay(schedstat)
            while True:
                t0 = clock()
                await asyncio.sleep(interval)
                lag = max(0.0, clock() - t0 - interval)
                samples.append(lag)
                if schedstat is not None:
                    wait1 = _run_delay(schedstat)
                    own.append(max(0.0, lag - (wait1 - wait0)))
                    wait0 = wait1
                for obs in self.observers:
                    obs.observe(lag)
        finally:
            if schedstat is not None:
                schedstat.close()

    def snapshot(self, reset: bool = False) -> dict[str, float]:
        """Lag percentiles in milliseconds over the samples kept (since the last reset); ``own_*`` without
        the time the process waited for a CPU (absent where the kernel does not say)."""
        values = sorted(self._samples)
        out = {
            "samples": float(len(values)),
            "p50_ms": percentile(values, 50) * 1e3,
            "p90_ms": percentile(values, 90) * 1e3,
            "p99_ms": percentile(values, 99) * 1e3,
            "max_ms": (values[-1] if values else 0.0) * 1e3,
        }
        if self._own:
            own = sorted(self._own)
            out.update(
                own_p50_ms=percentile(own, 50) * 1e3,
                own_p99_ms=percentile(own, 99) * 1e3,
                own_max_ms=own[-1] * 1e3,
            )
        if reset:
            self._samples.clear()
            self._own.clear()
        return out


def _run_delay(schedstat: IO[bytes] | None) -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (0 when unknown)."""
    if schedstat is None:
        return 0.0
    schedstat.seek(0)
    return int(schedstat.read().split()[1]) / 1e9
