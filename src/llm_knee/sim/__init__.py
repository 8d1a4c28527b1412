"""Simulated inference engine: scheduler, KV blocks, preemption, and its OpenAI-compatible server.

Offline (simulated time)::

    from llm_knee.sim import SimConfig, fixed_lengths, simulate_closed_loop
    result = simulate_closed_loop(SimConfig.from_catalog("Llama-3.1-8B", "H100-SXM"), 64, 60.0,
                                  sampler=fixed_lengths(512, 256), warmup_s=10.0)

Real time: ``llm_knee.sim.server`` (``knee serve-sim``, registered by ``llm_knee.sim.cli.register``).
"""

from llm_knee.sim.config import EngineConfig, KvExhaustedError, StepTimeModelLike
from llm_knee.sim.engine import Engine, StepOutcome, StepTrace
from llm_knee.sim.loop import RequestSampler, SimStats
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import (
    SimConfig,
    SimResult,
    fixed_lengths,
    sampler_from_lengths,
    simulate_arrivals,
    simulate_closed_loop,
    simulate_open_loop,
)
from llm_knee.sim.scheduler import SCHEDULING_POLICIES

__all__ = [
    "SCHEDULING_POLICIES",
    "Engine",
    "EngineConfig",
    "KvExhaustedError",
    "RequestSampler",
    "RequestSpec",
    "SimConfig",
    "SimResult",
    "SimStats",
    "StepOutcome",
    "StepTimeModelLike",
    "StepTrace",
    "fixed_lengths",
    "sampler_from_lengths",
    "simulate_arrivals",
    "simulate_closed_loop",
    "simulate_open_loop",
]
