"""Entry points: simulate one load level in simulated time and get records + engine telemetry back.

    cfg = SimConfig.from_catalog("Llama-3.1-8B", "H100-SXM", "bf16")
    result = simulate_closed_loop(cfg, concurrency=64, duration_s=60, warmup_s=10,
                                  sampler=fixed_lengths(512, 256), seed=1)
    result.records, result.telemetry, result.stats

Times in records and telemetry are ns of simulated time; a level starts at ``start_s`` (default 0), so
the levels of a ladder can share one timeline as a measured run's do. Requests sent during the warm-up
are marked ``warmup=True``. After the level's duration no new request is sent; the ones in
flight are completed (``drain=True``) as a measurement would wait for them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from llm_knee.records.schema import RequestRecord, TelemetrySample
from llm_knee.sim.config import EngineConfig, StepTimeModelLike
from llm_knee.sim.engine import Engine, StepTrace
from llm_knee.sim.loop import RequestSampler, SimStats, Simulation, StepHook
from llm_knee.sim.request import RequestSpec

NS = 1_000_000_000


@dataclass(frozen=True)
class SimConfig:
    """Everything that defines the simulated server: its timing model, context limit and knobs."""

    step_model: StepTimeModelLike
    max_context: int
    engine: EngineConfig = field(default_factory=EngineConfig)
    kv_capacity_tokens: int | None = None  # None: from the step model and gpu_memory_utilization
    telemetry_interval_s: float = 1.0

    @classmethod
    def from_catalog(
        cls,
        model: str,
        gpu: str,
        dtype: str = "bf16",
        tp: int = 1,
        *,
        kv_dtype: str | None = None,
        engine: EngineConfig | None = None,
        telemetry_interval_s: float = 1.0,
    ) -> SimConfig:
        """Build from catalog names (raises CatalogError for unknown names, DoesNotFitError when the
        model does not fit the GPUs)."""
        from llm_knee.catalog.dtypes import get_dtype
        from llm_knee.catalog.hardware import get_gpu
        from llm_knee.catalog.models import get_model
        from llm_knee.plan.roofline import StepTimeModel

        spec = get_model(model)
        step_model = StepTimeModel(
            spec, get_gpu(gpu), get_dtype(dtype), tp=tp, kv_dtype=get_dtype(kv_dtype) if kv_dtype else None
        )
        eng = engine or EngineConfig()
        # DoesNotFitError now, not in the middle of a run.
        step_model.kv_capacity_tokens(eng.gpu_memory_utilization, eng.max_num_batched_tokens)
        return cls(step_model, spec.max_context, eng, telemetry_interval_s=telemetry_interval_s)

    def build_engine(
        self, seed: int = 0, *, track_tokens: bool = False, trace: list[StepTrace] | None = None
    ) -> Engine:
        return Engine(
            self.step_model,
            self.engine,
            max_context=self.max_context,
            kv_capacity_tokens=self.kv_capacity_tokens,
            seed=seed,
            track_tokens=track_tokens,
            trace=trace,
        )


@dataclass
class SimResult:
    records: list[RequestRecord]
    telemetry: list[TelemetrySample]
    stats: SimStats


def fixed_lengths(prompt_tokens: int, output_tokens: int, priority: int = 0) -> RequestSampler:
    """A sampler giving every request the same lengths (the practitioners' first run, e.g. 512/256)."""
    spec = RequestSpec(prompt_tokens, output_tokens, priority)

    def sample(rng: random.Random) -> RequestSpec:
        return spec

    return sample


class LengthSource(Protocol):
    """A length distribution (``llm_knee.workload.lengths.LengthDist`` fits)."""

    def sample(self, rng: np.random.Generator) -> int: ...


def sampler_from_lengths(prompt: LengthSource, output: LengthSource, seed: int = 0) -> RequestSampler:
    """A sampler drawing prompt and output lengths from two distributions (numpy-seeded, reproducible)."""
    gen = np.random.default_rng(seed)

    def sample(_rng: random.Random) -> RequestSpec:
        return RequestSpec(int(prompt.sample(gen)), int(output.sample(gen)))

    return sample


def _check_times(duration_s: float, warmup_s: float) -> None:
    if not duration_s > 0 or not math.isfinite(duration_s):
        raise ValueError(f"duration_s must be a positive number of seconds (got {duration_s})")
    if warmup_s < 0 or not math.isfinite(warmup_s):
        raise ValueError(f"warmup_s must be >= 0 (got {warmup_s})")


def _probe(engine: Engine, sampler: RequestSampler, seed: int) -> None:
    """Reject impossible requests before anything runs: draw a few from a copy of the sampler's RNG."""
    rng = random.Random(seed)
    for _ in range(8):
        engine.validate(sampler(rng))


def _prepare(
    config: SimConfig,
    sampler: RequestSampler,
    seed: int,
    trace: list[StepTrace] | None,
    start_s: float,
    warmup_s: float,
    duration_s: float,
) -> tuple[Engine, int, int, int]:
    """Build the engine and reject impossible requests; return it with the run's start, end of warm-up
    and end, in simulated ns."""
    engine = config.build_engine(seed, trace=trace)
    _probe(engine, sampler, seed)
    start = round(start_s * NS)
    return engine, start, start + round(warmup_s * NS), start + round((warmup_s + duration_s) * NS)


def simulate_closed_loop(
    config: SimConfig,
    concurrency: int,
    duration_s: float,
    *,
    sampler: RequestSampler,
    warmup_s: float = 0.0,
    seed: int = 0,
    level_index: int = 0,
    think_time_s: float = 0.0,
    ramp_up_s: float = 0.0,
    start_s: float = 0.0,
    drain: bool = True,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_step: StepHook | None = None,
    trace: list[StepTrace] | None = None,
) -> SimResult:
    """``concurrency`` users, each sending its next request as soon as (``think_time_s`` after) the
    last one ends, for ``warmup_s + duration_s`` simulated seconds. Users start together at t=0, or
    spread evenly over ``ramp_up_s`` (with fixed lengths, users that start together stay in lock-step
    waves, as they do against a real server). ``on_record`` receives each record instead of it being
    kept in ``result.records`` (for very long runs)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1 (got {concurrency})")
    _check_times(duration_s, warmup_s)
    if ramp_up_s < 0 or think_time_s < 0 or start_s < 0:
        raise ValueError(
            f"ramp_up_s, think_time_s and start_s must be >= 0 (got {ramp_up_s}, {think_time_s}, {start_s})"
        )
    engine, start, warmup_ns, end_ns = _prepare(config, sampler, seed, trace, start_s, warmup_s, duration_s)
    sim = Simulation(
        engine,
        end_ns=end_ns,
        warmup_ns=warmup_ns,
        level_index=level_index,
        level=float(concurrency),
        telemetry_interval_ns=round(config.telemetry_interval_s * NS),
        sampler=sampler,
        rng=random.Random(seed),
        think_time_ns=round(think_time_s * NS),
        drain=drain,
        on_record=on_record,
        on_step=on_step,
    )
    stats = sim.run(users=concurrency, ramp_up_ns=round(ramp_up_s * NS), start_ns=start)
    return SimResult(sim.records, sim.telemetry, stats)


def poisson_arrivals(rate_rps: float, rng: random.Random) -> Iterator[int]:
    t = 0.0
    while True:
        t += rng.expovariate(rate_rps)
        yield round(t * NS)


def constant_arrivals(rate_rps: float) -> Iterator[int]:
    i = 0
    while True:
        yield round(i / rate_rps * NS)
        i += 1


ARRIVAL_PROCESSES: dict[str, Callable[[float, random.Random], Iterator[int]]] = {
    "poisson": poisson_arrivals,
    "constant": lambda rate, _rng: constant_arrivals(rate),
}


def simulate_open_loop(
    config: SimConfig,
    rate_rps: float,
    duration_s: float,
    *,
    sampler: RequestSampler,
    warmup_s: float = 0.0,
    seed: int = 0,
    level_index: int = 0,
    arrival: str = "poisson",
    start_s: float = 0.0,
    drain: bool = True,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_step: StepHook | None = None,
    trace: list[StepTrace] | None = None,
) -> SimResult:
    """Requests arrive at ``rate_rps`` (Poisson or constant spacing) whatever the engine's state."""
    if not rate_rps > 0 or not math.isfinite(rate_rps):
        raise ValueError(f"rate_rps must be a positive number (got {rate_rps})")
    if arrival not in ARRIVAL_PROCESSES:
        raise ValueError(f"unknown arrival process {arrival!r}; known: {', '.join(ARRIVAL_PROCESSES)}")
    _check_times(duration_s, warmup_s)
    if start_s < 0:
        raise ValueError(f"start_s must be >= 0 (got {start_s})")
    engine, start, warmup_ns, end_ns = _prepare(config, sampler, seed, trace, start_s, warmup_s, duration_s)
    rng = random.Random(seed)
    times = ARRIVAL_PROCESSES[arrival](rate_rps, random.Random(seed + 1))
    return _run_open(
        config,
        engine,
        ((start + t, sampler(rng)) for t in times),
        start_ns=start,
        end_ns=end_ns,
        warmup_ns=warmup_ns,
        level_index=level_index,
        level=rate_rps,
        drain=drain,
        on_record=on_record,
        on_step=on_step,
    )


def simulate_arrivals(
    config: SimConfig,
    arrivals: Iterable[tuple[float, RequestSpec]],
    *,
    seed: int = 0,
    level_index: int = 0,
    level: float = 0.0,
    on_step: StepHook | None = None,
    trace: list[StepTrace] | None = None,
) -> SimResult:
    """Replay explicit arrivals: (time in seconds from 0, request), in non-decreasing time order.
    Every request is validated before anything runs. ``trace`` collects a StepTrace per step."""
    engine = config.build_engine(seed, trace=trace)
    items = [(round(t * NS), spec) for t, spec in arrivals]
    last = 0
    for i, (t, spec) in enumerate(items):
        if t < last:
            raise ValueError(f"arrival {i} at {t / NS:.6f} s is earlier than the one before it")
        last = t
        try:
            engine.validate(spec)
        except ValueError as exc:
            raise ValueError(f"arrival {i}: {exc}") from exc
    return _run_open(
        config,
        engine,
        iter(items),
        start_ns=0,
        end_ns=last + 1,
        warmup_ns=0,
        level_index=level_index,
        level=level,
        drain=True,
        on_record=None,
        on_step=on_step,
    )


def _run_open(
    config: SimConfig,
    engine: Engine,
    arrivals: Iterator[tuple[int, RequestSpec]],
    *,
    start_ns: int,
    end_ns: int,
    warmup_ns: int,
    level_index: int,
    level: float,
    drain: bool,
    on_record: Callable[[RequestRecord], None] | None,
    on_step: StepHook | None,
) -> SimResult:
    def no_closed_loop(_rng: random.Random) -> RequestSpec:
        raise AssertionError("open-loop simulation has no users to sample for")

    sim = Simulation(
        engine,
        end_ns=end_ns,
        warmup_ns=warmup_ns,
        level_index=level_index,
        level=level,
        telemetry_interval_ns=round(config.telemetry_interval_s * NS),
        sampler=no_closed_loop,
        rng=random.Random(0),
        open_arrivals=arrivals,
        drain=drain,
        on_record=on_record,
        on_step=on_step,
    )
    stats = sim.run(start_ns=start_ns)
    return SimResult(sim.records, sim.telemetry, stats)
