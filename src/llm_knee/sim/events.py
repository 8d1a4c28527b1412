"""The discrete events of a simulation. Each handles itself against the ``Simulation`` (sim.loop)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from llm_knee.records.schema import TelemetrySample
from llm_knee.sim.request import RequestSpec

if TYPE_CHECKING:
    from llm_knee.sim.loop import Simulation


class Event(Protocol):
    def handle(self, sim: Simulation, now_ns: int) -> None: ...


class Arrival:
    """A request reaches the engine. ``user`` is the closed-loop virtual user (-1 in open loop)."""

    __slots__ = ("spec", "user")

    def __init__(self, spec: RequestSpec, user: int) -> None:
        self.spec = spec
        self.user = user

    def handle(self, sim: Simulation, now_ns: int) -> None:
        sim.engine.add_request(self.spec, now_ns, payload=self.user)
        if self.user < 0:
            sim.next_open_arrival()
        sim.start_step_if_idle(now_ns)


class StepEnd:
    """The forward pass in flight completes: tokens come out, finished requests leave."""

    __slots__ = ()

    def handle(self, sim: Simulation, now_ns: int) -> None:
        outcome = sim.engine.end_step()
        if sim.on_step is not None:
            sim.on_step(sim.engine, outcome)
        for req in outcome.finished:
            sim.finish(req, now_ns)
        sim.stepping = False
        sim.start_step_if_idle(now_ns)


STEP_END = StepEnd()


class TelemetryTick:
    """Sample the engine's queue, KV usage and preemptions, like a scrape of vLLM's /metrics."""

    __slots__ = ()

    def handle(self, sim: Simulation, now_ns: int) -> None:
        eng = sim.engine
        sim.telemetry.extend(
            (
                TelemetrySample(now_ns, "engine", "engine.requests_running", float(eng.num_running)),
                TelemetrySample(now_ns, "engine", "engine.requests_waiting", float(eng.num_waiting)),
                TelemetrySample(now_ns, "engine", "engine.kv_cache_usage", eng.kv_usage),
                TelemetrySample(now_ns, "engine", "engine.preemptions_total", float(eng.num_preemptions)),
            )
        )
        if sim.active(now_ns):
            sim.push(now_ns + sim.telemetry_interval_ns, self)


TELEMETRY_TICK = TelemetryTick()
