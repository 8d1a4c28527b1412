"""The discrete-event loop: a heap of (time, order, event), run in simulated nanoseconds.

Load comes from closed-loop users (each sends its next request when the last one ends) or an
open-loop arrival stream; finished requests become ``RequestRecord``s on the simulated clock.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from llm_knee.records.schema import RequestRecord, TelemetrySample
from llm_knee.sim.engine import Engine, StepOutcome
from llm_knee.sim.events import STEP_END, TELEMETRY_TICK, Arrival, Event
from llm_knee.sim.request import RequestSpec, SimRequest

RequestSampler = Callable[[random.Random], RequestSpec]
StepHook = Callable[[Engine, StepOutcome], None]


@dataclass(frozen=True, slots=True)
class SimStats:
    steps: int
    sim_end_ns: int  # time of the last event
    requests_finished: int
    preemptions: int
    kv_blocks_total: int
    block_size: int


def to_record(
    req: SimRequest, end_ns: int, *, level_index: int, level: float, worker: int, warmup: bool
) -> RequestRecord:
    """A finished simulated request as the record a measurement of it would have produced."""
    times = req.times
    return RequestRecord(
        request_id=req.id,
        level_index=level_index,
        level=level,
        worker=worker,
        warmup=warmup,
        scheduled_ns=req.arrival_ns,
        sent_ns=req.arrival_ns,
        first_token_ns=times[0],
        last_token_ns=times[-1],
        end_ns=end_ns,
        itl_ns=np.diff(np.frombuffer(times, dtype=np.int64)).tolist(),
        prompt_tokens=req.prompt,
        prompt_tokens_server=req.prompt,
        output_tokens_requested=req.output,
        output_chunks=len(times),
        output_tokens_server=req.generated,
        http_status=200,
    )


class Simulation:
    def __init__(
        self,
        engine: Engine,
        *,
        end_ns: int,
        warmup_ns: int = 0,
        level_index: int = 0,
        level: float = 0.0,
        telemetry_interval_ns: int = 1_000_000_000,
        sampler: RequestSampler,
        rng: random.Random,
        think_time_ns: int = 0,
        open_arrivals: Iterator[tuple[int, RequestSpec]] | None = None,
        drain: bool = True,
        on_record: Callable[[RequestRecord], None] | None = None,
        on_step: StepHook | None = None,
    ) -> None:
        if telemetry_interval_ns <= 0:
            raise ValueError(f"telemetry interval must be positive (got {telemetry_interval_ns} ns)")
        self.engine = engine
        self.end_ns = end_ns
        self.warmup_ns = warmup_ns
        self.level_index = level_index
        self.level = level
        self.telemetry_interval_ns = telemetry_interval_ns
        self.sampler = sampler
        self.rng = rng
        self.think_time_ns = think_time_ns
        self._open = open_arrivals
        self.drain = drain
        self.records: list[RequestRecord] = []
        self.on_record = on_record if on_record is not None else self.records.append
        self.on_step = on_step
        self.telemetry: list[TelemetrySample] = []
        self.stepping = False
        self.finished = 0
        self._heap: list[tuple[int, int, Event]] = []
        self._order = itertools.count()
        self._now = 0

    def push(self, t_ns: int, event: Event) -> None:
        heapq.heappush(self._heap, (t_ns, next(self._order), event))

    # --- called by events
    def start_step_if_idle(self, now_ns: int) -> None:
        if self.stepping:
            return
        dur = self.engine.begin_step(now_ns)
        if dur is not None:
            self.stepping = True
            self.push(now_ns + dur, STEP_END)

    def finish(self, req: SimRequest, now_ns: int) -> None:
        self.finished += 1
        user = req.payload if isinstance(req.payload, int) else -1
        self.on_record(
            to_record(
                req,
                now_ns,
                level_index=self.level_index,
                level=self.level,
                worker=max(user, 0),
                warmup=req.arrival_ns < self.warmup_ns,
            )
        )
        if user >= 0 and now_ns + self.think_time_ns < self.end_ns:
            self.push(now_ns + self.think_time_ns, Arrival(self.sampler(self.rng), user))

    def next_open_arrival(self) -> None:
        if self._open is None:
            return
        nxt = next(self._open, None)
        if nxt is not None and nxt[0] < self.end_ns:
            self.push(nxt[0], Arrival(nxt[1], -1))

    def active(self, now_ns: int) -> bool:
        """Whether anything is left to happen (telemetry stops ticking once nothing is)."""
        return (
            now_ns < self.end_ns
            or self.engine.has_work
            or any(not isinstance(ev, type(TELEMETRY_TICK)) for _, _, ev in self._heap)
        )

    # --- the loop
    def run(self, users: int = 0, ramp_up_ns: int = 0, start_ns: int = 0) -> SimStats:
        """Run to completion. ``users`` closed-loop users start at ``start_ns``, evenly spread over
        ``ramp_up_ns`` (all at once when 0); open-loop arrivals come at their own times."""
        self._now = start_ns
        for user in range(users):
            self.push(start_ns + ramp_up_ns * user // users, Arrival(self.sampler(self.rng), user))
        self.next_open_arrival()
        self.push(start_ns, TELEMETRY_TICK)
        heap = self._heap
        pop = heapq.heappop
        while heap:
            t, _, event = pop(heap)
            if not self.drain and t > self.end_ns:
                break
            self._now = t
            event.handle(self, t)
        eng = self.engine
        return SimStats(
            steps=eng.k,
            sim_end_ns=self._now,
            requests_finished=self.finished,
            preemptions=eng.num_preemptions,
            kv_blocks_total=eng.pool.total,
            block_size=eng.block_size,
        )
