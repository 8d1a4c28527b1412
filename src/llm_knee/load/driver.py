"""Drivers for one level: closed loop (N virtual users) and open loop (arrivals at a rate).

Both share one controller that decides when the warm-up ends, estimates throughput over equal windows,
ends the level once it is steady (see LoadSettings) or at its time limit, and drains the requests still
in flight. Every finished request goes to ``sink`` (which writes it to disk) *before* it is counted.
Interrupted (Ctrl-C) levels stop at once; in-flight requests are cancelled and, never having completed,
are not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from llm_knee.analysis.stats import is_stable
from llm_knee.analysis.summary import Window
from llm_knee.load.settings import LoadSettings
from llm_knee.records.schema import RequestRecord
from llm_knee.workload.prompts import Prompt

NS = 1_000_000_000


class Sender(Protocol):
    """Sends one prompt and fills ``record`` in place; never raises for request-level faults."""

    async def __call__(self, prompt: Prompt, record: RequestRecord, live: Live) -> RequestRecord: ...


class PromptFeed(Protocol):
    def next(self) -> Prompt: ...


@dataclass
class Live:
    """Counters read by the progress display and the controller; written only by this event loop."""

    level_index: int = -1
    level: float = 0.0
    phase: str = "idle"  # warmup | measure | drain | done
    level_started_ns: int = 0
    in_flight: int = 0
    done: int = 0
    errors: int = 0
    tokens: int = 0  # output chunks seen so far, incremented by the client as they arrive
    rate_tok_s: float = 0.0  # latest window estimate
    retries: int = 0

    def reset(self, level_index: int, level: float, now_ns: int) -> None:
        self.level_index, self.level, self.phase, self.level_started_ns = level_index, level, "warmup", now_ns
        self.done = self.errors = self.retries = 0
        self.rate_tok_s = 0.0


@dataclass
class LevelOutcome:
    window: Window
    steady: bool
    stop_reason: str
    drain_s: float
    interrupted: bool
    window_rates: list[float] = field(default_factory=list)


class _Controller:
    def __init__(
        self,
        settings: LoadSettings,
        live: Live,
        clock: Callable[[], int],
        users: int | None,
        stop: asyncio.Event,
    ) -> None:
        self.s = settings
        self.live = live
        self.clock = clock
        self.users = users
        self.external_stop = stop
        self.start_ns = clock()
        self.warm_end_ns: int | None = None
        self.finished_users: set[int] = set()
        self.measured_done = 0
        self.rates: list[float] = []
        self.stop_issuing = asyncio.Event()

    @property
    def warming(self) -> bool:
        return self.warm_end_ns is None

    async def send_and_keep(
        self, send: Sender, prompt: Prompt, rec: RequestRecord, sink: Callable[[RequestRecord], None]
    ) -> None:
        live = self.live
        live.in_flight += 1
        try:
            await send(prompt, rec, live)
        finally:
            live.in_flight -= 1
        sink(rec)  # on disk before it is counted
        self.finished_users.add(rec.worker)
        if not rec.warmup:
            self.measured_done += 1
        live.done += 1
        live.errors += 0 if rec.ok else 1
        live.retries += rec.retries

    def _warmup_over(self, now: int, open_loop_min_s: float) -> bool:
        elapsed = (now - self.start_ns) / NS
        if elapsed < max(self.s.warmup_s, open_loop_min_s):
            return False
        if elapsed >= self.s.warmup_max_s:
            return True
        return self.users is None or len(self.finished_users) >= self.users

    async def run(self, open_loop_min_warmup_s: float = 0.0) -> tuple[str, bool]:
        """Returns (stop reason, steady) once the level should stop issuing requests."""
        tick = min(0.1, self.s.stability_window_s / 4)
        window_start = 0
        window_tokens = 0
        while True:
            try:
                await asyncio.wait_for(self.external_stop.wait(), timeout=tick)
                return "interrupted", False
            except TimeoutError:
                pass
            now = self.clock()
            if self.warming:
                if self._warmup_over(now, open_loop_min_warmup_s):
                    self.warm_end_ns = now
                    self.live.phase = "measure"
                    window_start, window_tokens = now, self.live.tokens
                continue
            assert self.warm_end_ns is not None
            if (now - window_start) / NS >= self.s.stability_window_s:
                rate = (self.live.tokens - window_tokens) / ((now - window_start) / NS)
                self.rates.append(rate)
                self.live.rate_tok_s = rate
                window_start, window_tokens = now, self.live.tokens
            measured_s = (now - self.warm_end_ns) / NS
            if self.s.max_requests_per_level is not None and self.measured_done >= self.s.max_requests_per_level:
                return "max requests", is_stable(self.rates, last=self.s.stability_windows, max_cv=self.s.stability_cv)
            if measured_s >= self.s.max_duration_s:
                return "max duration", is_stable(self.rates, last=self.s.stability_windows, max_cv=self.s.stability_cv)
            if (
                measured_s >= self.s.min_duration_s
                and self.measured_done >= self.s.min_requests
                and is_stable(self.rates, last=self.s.stability_windows, max_cv=self.s.stability_cv)
            ):
                return "steady", True


async def _drain(tasks: list[asyncio.Task[None]], timeout_s: float, cancel: bool) -> None:
    if not tasks:
        return
    if cancel:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for t in done:
        exc = t.exception()
        if exc is not None:
            raise exc


def _new_record(
    session: int,
    level_index: int,
    level: float,
    worker: int,
    seq: int,
    prompt: Prompt,
    warmup: bool,
    sched: int,
) -> RequestRecord:
    return RequestRecord(
        request_id=f"s{session}-l{level_index}-w{worker}-{seq}",
        level_index=level_index,
        level=level,
        session=session,
        worker=worker,
        warmup=warmup,
        scheduled_ns=sched,
        prompt_tokens=prompt.prompt_tokens,
        output_tokens_requested=prompt.output_tokens,
    )


@dataclass(frozen=True)
class LevelContext:
    """What every level driver needs besides its load value: where requests go, where records go."""

    level_index: int
    session: int
    settings: LoadSettings
    send: Sender
    prompts: PromptFeed
    sink: Callable[[RequestRecord], None]  # writes a record to disk; called before it is counted
    live: Live
    stop: asyncio.Event  # set by SIGINT/SIGTERM
    clock: Callable[[], int]  # ns since the session anchor
    drain_timeout_s: float


async def run_closed_level(cx: LevelContext, concurrency: int, *, ramp_s: float = 0.0) -> LevelOutcome:
    """``ramp_s``: users start spread evenly over this many seconds instead of all at once. With fixed
    lengths, users that start together stay in lock-step for the whole level (every prefill in one
    burst, then only decodes), which no real traffic does; one request's duration of ramp breaks that."""
    cx.live.reset(cx.level_index, concurrency, cx.clock())
    ctl = _Controller(cx.settings, cx.live, cx.clock, concurrency, cx.stop)

    async def user(u: int) -> None:
        seq = 0
        delay = ramp_s * u / concurrency
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctl.stop_issuing.wait(), timeout=delay)
        while not ctl.stop_issuing.is_set():
            prompt = cx.prompts.next()
            rec = _new_record(cx.session, cx.level_index, concurrency, u, seq, prompt, ctl.warming, cx.clock())
            seq += 1
            await ctl.send_and_keep(cx.send, prompt, rec, cx.sink)

    tasks = [asyncio.create_task(user(u)) for u in range(int(concurrency))]
    reason, steady = await _run_controller(ctl, tasks)
    return await _finish(ctl, tasks, reason, steady, cx.session, cx.drain_timeout_s)


async def run_open_level(cx: LevelContext, rate: float) -> LevelOutcome:
    """Arrivals on a fixed schedule (constant or Poisson), whatever the server does. Latency counts from
    the *scheduled* time; a request that waits for a free slot in the client shows as client queueing."""
    settings, clock = cx.settings, cx.clock
    cx.live.reset(cx.level_index, rate, clock())
    ctl = _Controller(settings, cx.live, clock, None, cx.stop)
    rng = np.random.default_rng([settings.seed, cx.level_index])
    slots = asyncio.Semaphore(settings.max_in_flight)
    tasks: list[asyncio.Task[None]] = []

    async def one(seq: int, sched: int, warmup: bool) -> None:
        prompt = cx.prompts.next()
        rec = _new_record(cx.session, cx.level_index, rate, 0, seq, prompt, warmup, sched)
        async with slots:
            await ctl.send_and_keep(cx.send, prompt, rec, cx.sink)

    async def schedule() -> None:
        # Sleep to absolute times so that sleep overshoot never accumulates into a lower rate.
        next_ns = clock()
        seq = 0
        while not ctl.stop_issuing.is_set():
            gap = 1.0 / rate if settings.arrival == "constant" else float(rng.exponential(1.0 / rate))
            next_ns += int(gap * NS)
            delay = (next_ns - clock()) / NS
            if delay > 0:
                try:
                    await asyncio.wait_for(ctl.stop_issuing.wait(), timeout=delay)
                    return
                except TimeoutError:
                    pass
            tasks.append(asyncio.create_task(one(seq, next_ns, ctl.warming)))
            seq += 1

    scheduler = asyncio.create_task(schedule())
    # Open loop has no "every user finished once": warm up for a few arrivals' worth of time instead.
    reason, steady = await _run_controller(ctl, [scheduler], open_loop_min_warmup_s=min(10.0 / rate, 10.0))
    ctl.stop_issuing.set()
    await asyncio.gather(scheduler, return_exceptions=True)
    return await _finish(ctl, tasks, reason, steady, cx.session, cx.drain_timeout_s)


async def _run_controller(
    ctl: _Controller, tasks: list[asyncio.Task[None]], open_loop_min_warmup_s: float = 0.0
) -> tuple[str, bool]:
    control = asyncio.create_task(ctl.run(open_loop_min_warmup_s))
    # A worker that dies of a bug must stop the level loudly, not leave it running short-handed.
    waiting: set[asyncio.Task[object]] = {control, *tasks}
    while True:
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if control in done:
            return control.result()
        for t in done:
            waiting.discard(t)
            if t.exception() is not None:
                control.cancel()
                ctl.stop_issuing.set()
                raise t.exception()  # type: ignore[misc]


async def _finish(
    ctl: _Controller,
    tasks: list[asyncio.Task[None]],
    reason: str,
    steady: bool,
    session: int,
    drain_timeout_s: float,
) -> LevelOutcome:
    ctl.stop_issuing.set()
    stop_ns = ctl.clock()
    start_ns = ctl.warm_end_ns if ctl.warm_end_ns is not None else stop_ns
    ctl.live.phase = "drain"
    interrupted = reason == "interrupted"
    t0 = time.perf_counter()
    await _drain(tasks, drain_timeout_s, cancel=interrupted)
    drain_s = time.perf_counter() - t0
    ctl.live.phase = "done"
    return LevelOutcome(
        window=Window(start_ns, max(stop_ns, start_ns), session),
        steady=steady,
        stop_reason=reason,
        drain_s=drain_s,
        interrupted=interrupted,
        window_rates=list(ctl.rates),
    )
