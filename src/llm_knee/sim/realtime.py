"""The engine model advanced in real time: one asyncio task runs steps and hands tokens to streams.

Each step is scheduled, the task sleeps until the step's simulated end in wall time (``speed`` > 1 runs
faster than real time), then every request that produced a token gets it through its ``Sink``. While
the engine is busy, a step starts at the previous step's simulated end, so host jitter does not
stretch the engine's timeline; if the host falls more than ``resync_ms`` behind, the timeline is
re-anchored to now (counted in ``stats()["resyncs"]``). Token delivery yields to the event loop every
``slice_ms`` of work so hundreds of streams do not hold the loop in one burst.

Ground truth: for every request the engine's own token times (mapped to ``time.perf_counter_ns()``,
which on Linux is CLOCK_MONOTONIC and therefore comparable across processes on one host) and the
actual write times are kept; ``truth(id)`` returns them (the last ``truth_keep`` requests).
"""

from __future__ import annotations

import asyncio
import math
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from llm_knee.sim.config import KvExhaustedError
from llm_knee.sim.engine import Engine, StepOutcome
from llm_knee.sim.faults import FaultConfig
from llm_knee.sim.looplag import cancel_and_wait
from llm_knee.sim.metrics import ServerMetrics
from llm_knee.sim.request import RequestSpec, State


class Sink:
    """One request's receiving end. Subclasses deliver tokens (SSE writes, or collect for a JSON body).

    Bookkeeping here: token times (engine's and actually written), metrics, the done future.
    """

    __slots__ = (
        "arrival_ns",
        "closed",
        "done",
        "end_ns",
        "fault",
        "fault_at",
        "id",
        "intended",
        "n",
        "preemptions",
        "rt",
        "spec",
        "status",
        "written",
    )

    def __init__(self, rt: RealtimeEngine, request_id: str, spec: RequestSpec, fault: str | None = None) -> None:
        self.rt = rt
        self.id = request_id
        self.spec = spec
        self.arrival_ns = time.perf_counter_ns()
        self.n = 0  # tokens delivered
        self.intended = array("q")  # engine's token times, perf_counter_ns
        self.written = array("q")  # when each token was handed to the transport (just before)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self.status = "waiting"
        self.end_ns = -1
        self.preemptions = 0
        self.fault = fault
        self.fault_at = max(1, spec.output_tokens // 2)  # mid-stream faults strike at this token

    async def emit(self, wall_ns: int, final: bool) -> None:
        """Called by the engine task for each token, ``wall_ns`` = the engine's time for it."""
        if self.closed:
            return
        n = self.n + 1
        t_write = time.perf_counter_ns()  # before the write: the client may read it before write() returns
        if not await self.deliver(n, final):
            return
        self.n = n
        metrics = self.rt.metrics
        if n == 1:
            self.status = "running"
            metrics.ttft.observe((wall_ns - self.arrival_ns) / 1e9)
            metrics.prompt_tokens += self.spec.prompt_tokens
        else:
            metrics.itl.observe((wall_ns - self.intended[-1]) / 1e9)
        metrics.generation_tokens += 1
        self.intended.append(wall_ns)
        self.written.append(t_write)
        if final:
            metrics.requests_success += 1
            metrics.e2e.observe((wall_ns - self.arrival_ns) / 1e9)
            self.finish("finished")

    async def deliver(self, n: int, final: bool) -> bool:
        """Hand token ``n`` to the client (the last one when ``final``); False when it could not be
        (the sink has then been finished with the reason)."""
        return True

    def finish(self, status: str) -> None:
        """End this request: stop deliveries, release the handler, keep the truth."""
        if self.closed:
            return
        self.closed = True
        self.status = status
        self.end_ns = time.perf_counter_ns()
        if status != "finished":
            self.rt.metrics.requests_failed += 1
            self.rt.cancel(self.id)
        self.rt.retire(self)
        if not self.done.done():
            self.done.set_result(None)

    def truth(self) -> dict[str, Any]:
        intended = self.intended.tolist()
        return {
            "id": self.id,
            "status": self.status,
            "clock": "perf_counter_ns (CLOCK_MONOTONIC on Linux: comparable across processes)",
            "prompt_tokens": self.spec.prompt_tokens,
            "max_tokens": self.spec.output_tokens,
            "output_tokens": self.n,
            "arrival_ns": self.arrival_ns,
            "first_token_ns": intended[0] if intended else -1,
            "token_ns": intended,
            "token_offsets_ns": [t - self.arrival_ns for t in intended],
            "written_ns": self.written.tolist(),
            "end_ns": self.end_ns,
            "preemptions": self.preemptions,
            "fault": self.fault,
        }


class RealtimeEngine:
    def __init__(
        self,
        engine: Engine,
        *,
        speed: float = 1.0,
        faults: FaultConfig | None = None,
        on_oom: Callable[[str], None] | None = None,
        truth_keep: int = 4096,
        resync_ms: float = 20.0,
        slice_ms: float = 0.5,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0 (got {speed})")
        if truth_keep < 0:
            raise ValueError(f"truth_keep must be >= 0 (got {truth_keep})")
        self.engine = engine
        self.speed = speed
        self.faults = faults or FaultConfig()
        self._on_oom = on_oom
        self.metrics = ServerMetrics.new()
        self._t0 = time.perf_counter_ns()
        self._wake = asyncio.Event()
        self._sinks: dict[str, Sink] = {}
        self._truth: OrderedDict[str, Sink] = OrderedDict()  # finished sinks: compact arrays, no per-token objects
        self._truth_keep = truth_keep
        self._resync_ns = round(resync_ms * 1e6 * speed)  # in simulated ns
        self._slice_ns = round(slice_ms * 1e6)
        self._stall_every_ns = round(self.faults.stall_every_s * 1e9)
        self._stall_s = self.faults.stall_ms / 1e3
        self._next_stall = self._t0 + self._stall_every_ns
        self.resyncs = 0
        self.stalls = 0
        self.tokens = 0
        self.max_slice_ns = 0  # longest stretch the engine task held the loop while delivering tokens
        self._task: asyncio.Task[None] | None = None

    # --- clocks
    def sim_now(self) -> int:
        return round((time.perf_counter_ns() - self._t0) * self.speed)

    def wall_of(self, sim_ns: int) -> int:
        return self._t0 + round(sim_ns / self.speed)

    # --- requests
    def validate(self, spec: RequestSpec) -> None:
        self.engine.validate(spec)

    def submit(self, sink: Sink) -> None:
        self.engine.add_request(sink.spec, self.sim_now(), request_id=sink.id, payload=sink)
        self._sinks[sink.id] = sink
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def retire(self, sink: Sink) -> None:
        self._sinks.pop(sink.id, None)
        if self._truth_keep:
            self._truth[sink.id] = sink
            while len(self._truth) > self._truth_keep:
                self._truth.popitem(last=False)

    def truth(self, request_id: str) -> dict[str, Any] | None:
        sink = self._sinks.get(request_id) or self._truth.get(request_id)
        return sink.truth() if sink is not None else None

    @property
    def open_streams(self) -> int:
        return len(self._sinks)

    def stats(self) -> dict[str, float]:
        eng = self.engine
        return {
            "open_requests": float(len(self._sinks)),
            "running": float(eng.num_running),
            "waiting": float(eng.num_waiting),
            "kv_cache_usage": eng.kv_usage,
            "preemptions": float(eng.num_preemptions),
            "steps": float(eng.k),
            "tokens": float(self.tokens),
            "resyncs": float(self.resyncs),
            "stalls": float(self.stalls),
            "speed": self.speed,
            "max_slice_ms": self.max_slice_ns / 1e6,
        }

    def reset_peaks(self) -> None:
        self.max_slice_ns = 0

    # --- the engine task
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        for sink in list(self._sinks.values()):
            sink.finish("aborted")

    async def _run(self) -> None:
        eng = self.engine
        prev_end: int | None = None
        while True:
            if not eng.has_work:
                self._wake.clear()
                await self._wake.wait()
                prev_end = None
                continue
            if self._stall_every_ns and time.perf_counter_ns() >= self._next_stall:
                await self._stall()
            now = self.sim_now()
            if prev_end is None or now - prev_end > self._resync_ns:
                if prev_end is not None:
                    self.resyncs += 1
                start = now
            else:
                start = prev_end
            try:
                dur = eng.begin_step(start)
            except KvExhaustedError as exc:
                if self._on_oom is not None:
                    self._on_oom(str(exc))
                raise
            if dur is None:  # only requests that arrived after `start`: take them next time round
                prev_end = None
                await asyncio.sleep(0)
                continue
            end = start + dur
            wall_end = self.wall_of(end)
            # Timers fire on whole milliseconds (epoll; uvloop even rounds to the nearest one, so it can
            # fire early): sleep whole milliseconds, rounded up, until the step's end has really passed.
            while (left := wall_end - time.perf_counter_ns()) > 0:
                await asyncio.sleep(math.ceil(left / 1e6) / 1e3)
            outcome = eng.end_step()
            prev_end = end
            await self._dispatch(outcome, wall_end)

    async def _stall(self) -> None:
        """Freeze the engine (and so every stream): simulated time does not pass during a stall."""
        t = time.perf_counter_ns()
        await asyncio.sleep(self._stall_s)
        frozen = time.perf_counter_ns() - t
        self._t0 += frozen
        self._next_stall = time.perf_counter_ns() + self._stall_every_ns
        self.stalls += 1

    async def _dispatch(self, out: StepOutcome, wall_ns: int) -> None:
        clock = time.perf_counter_ns
        slice_ns = self._slice_ns
        t_slice = clock()
        i = 0
        finished = State.FINISHED
        for group in (out.prefill_done, out.decoded or ()):
            for req in group:
                sink = req.payload
                if not isinstance(sink, Sink):
                    continue
                if req.preemptions != sink.preemptions:
                    sink.preemptions = req.preemptions
                await sink.emit(wall_ns, req.state is finished)
                i += 1
                if not i & 7 and (busy := clock() - t_slice) > slice_ns:
                    self.max_slice_ns = max(self.max_slice_ns, busy)
                    await asyncio.sleep(0)
                    t_slice = clock()
        self.max_slice_ns = max(self.max_slice_ns, clock() - t_slice)
        self.tokens += i
