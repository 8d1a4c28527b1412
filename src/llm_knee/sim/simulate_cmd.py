"""`knee simulate`: the concurrency ladder in simulated time, judged and shown exactly as `knee find` shows a
measured one, plus a what-if across values of one engine knob.

Pipeline: a ``Profile`` (model, GPU, dtype, lengths, engine knobs) is checked whole before anything runs
(``prepare``), run through ``sim.ladder.simulate_ladder`` with a ramp-up and warm-up sized from the planner's
predicted request lifetime, and turned into the same result document as a measured run (``summarize_level``
per level, engine telemetry under server names for the queueing verdict, ``recommend``, ``build_result``).

Registered by ``register(app)`` as ``knee simulate``.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any

import numpy as np
import orjson
import typer
from rich.console import Console
from rich.table import Table

from llm_knee.analysis.findings import telemetry_findings
from llm_knee.analysis.recommend import AnalysisSettings, recommend
from llm_knee.analysis.slo import Objective, parse_slo
from llm_knee.plan.inputs import Lengths
from llm_knee.plan.roofline import StepTimeModel
from llm_knee.plan.speed import Curves
from llm_knee.report.console import print_result
from llm_knee.report.result import analysis_json, build_result
from llm_knee.sim.config import EngineConfig
from llm_knee.sim.ladder import LadderRun, LevelTiming, extend_while_climbing, next_ladder_step, simulate_ladder
from llm_knee.sim.loop import RequestSampler
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import SimConfig, fixed_lengths
from llm_knee.workload.lengths import LengthDist
from llm_knee.workload.lengths import parse as parse_length

EXIT_BAD_INPUT = 2
DEFAULT_LADDER: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64)
EXTEND_MIN_GAIN = 0.05  # keep extending while output throughput grows at least this much per step
RAMP_E2E = 1.0  # users start spread over one predicted request lifetime (no lock-step waves) ...
SETTLE_E2E = 1.0  # ... then one more lifetime is discarded before measuring
NORMAL_TAIL_Z = 4.0  # normal length draws are clipped at mean + 4 stdev (a 3e-5 tail)

# Engine knobs that may be given as a comma list for a what-if: option name -> (EngineConfig field, parser).
WHAT_IF_KNOBS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--prefix-hit-rate": ("prefix_hit_rate", float),
    "--shared-prefix": ("shared_prefix_tokens", int),
    "--scheduling-policy": ("scheduling_policy", str),
}


@dataclass(frozen=True)
class Profile:
    """What is simulated: the hardware and model, the request lengths, and the engine's knobs."""

    model: str
    gpu: str
    dtype: str = "bf16"
    tp: int = 1
    kv_dtype: str | None = None
    input_len: LengthDist = field(default_factory=lambda: LengthDist.fixed(512))
    output_len: LengthDist = field(default_factory=lambda: LengthDist.fixed(256))
    engine: EngineConfig = field(default_factory=EngineConfig)


@dataclass(frozen=True)
class Prepared:
    """A profile checked against the catalog and the engine: safe to run."""

    profile: Profile
    config: SimConfig
    step_model: StepTimeModel
    kv_capacity_tokens: int

    def describe(self) -> str:
        p, e, m = self.profile, self.profile.engine, self.step_model
        prefix = (
            f"prefix caching on ({e.shared_prefix_tokens}-token shared prefix, hit rate {e.prefix_hit_rate:g})"
            if e.enable_prefix_caching
            else "prefix caching off"
        )
        return (
            f"{m.model.name} {m.dtype.name} on {p.tp} x {m.gpu.name} (KV cache {m.kv_dtype.name}, "
            f"{self.kv_capacity_tokens:,} tokens); max_num_seqs {e.max_num_seqs}, max_num_batched_tokens "
            f"{e.max_num_batched_tokens}, chunked prefill {'on' if e.enable_chunked_prefill else 'off'}, "
            f"gpu_memory_utilization {e.gpu_memory_utilization:g}, {prefix}, policy {e.scheduling_policy}; "
            f"requests {p.input_len} in / {p.output_len} out tokens"
        )

    def to_dict(self) -> dict[str, Any]:
        p, m = self.profile, self.step_model
        return {
            "simulated": True,
            "model": m.model.name,
            "gpu": m.gpu.name,
            "dtype": m.dtype.name,
            "kv_cache_dtype": m.kv_dtype.name,
            "tp": p.tp,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "engine": asdict(p.engine),
        }


def length_bound(dist: LengthDist) -> int:
    """The longest length the simulation draws from ``dist`` (normal draws are clipped there)."""
    if dist.kind == "fixed":
        return dist.length
    if dist.kind == "uniform":
        return dist.high
    return max(1, math.ceil(dist.mu + NORMAL_TAIL_Z * dist.sigma))


def prepare(profile: Profile) -> Prepared:
    """Check everything that could stop a run, before any of it runs. Raises ValueError (CatalogError for
    unknown names, DoesNotFitError with the shortfall and what would fit) with a one-line message."""
    e = profile.engine
    if e.prefix_hit_rate > 0 and not e.enable_prefix_caching:
        raise ValueError("--prefix-hit-rate needs --enable-prefix-caching (and a --shared-prefix length)")
    if e.enable_prefix_caching and e.shared_prefix_tokens <= 0:
        raise ValueError("--enable-prefix-caching needs --shared-prefix TOKENS: the prefix every prompt shares")
    if e.shared_prefix_tokens > profile.input_len.minimum:
        raise ValueError(
            f"--shared-prefix {e.shared_prefix_tokens} is longer than the shortest prompt "
            f"({profile.input_len.minimum} tokens): the shared prefix is part of every prompt"
        )
    config = SimConfig.from_catalog(
        profile.model, profile.gpu, profile.dtype, profile.tp, kv_dtype=profile.kv_dtype, engine=e
    )
    step_model = config.step_model
    if not isinstance(step_model, StepTimeModel):  # from_catalog always builds the roofline model
        raise TypeError(f"unexpected step model {type(step_model).__name__}")
    longest_in, longest_out = length_bound(profile.input_len), length_bound(profile.output_len)
    try:
        step_model.check_lengths(longest_in, longest_out)
    except ValueError as exc:
        drawn = [
            f"{d} draws up to {length_bound(d)}" for d in (profile.input_len, profile.output_len) if d.kind != "fixed"
        ]
        raise ValueError(f"{exc}" + (f" ({'; '.join(drawn)})" if drawn else "")) from None
    engine = config.build_engine()  # validates the knobs (e.g. max_num_batched_tokens >= max_num_seqs)
    for spec in {
        RequestSpec(longest_in, longest_out),
        RequestSpec(profile.input_len.minimum, profile.output_len.minimum),
    }:
        engine.validate(spec)  # e.g. a prompt above max_num_batched_tokens without chunked prefill
    capacity = step_model.kv_capacity_tokens(e.gpu_memory_utilization, e.max_num_batched_tokens)
    return Prepared(profile, config, step_model, capacity)


def _sampler(profile: Profile, seed: int) -> RequestSampler:
    inp, out = profile.input_len, profile.output_len
    if inp.kind == "fixed" and out.kind == "fixed":
        return fixed_lengths(inp.length, out.length)
    gen = np.random.default_rng(seed)
    cap_in, cap_out = length_bound(inp), length_bound(out)

    def sample(_rng: random.Random) -> RequestSpec:
        return RequestSpec(min(inp.sample(gen), cap_in), min(out.sample(gen), cap_out))

    return sample


def predicted_e2e(prep: Prepared) -> Callable[[int], float]:
    """The planner's steady-state request lifetime (seconds) at each concurrency, queueing included."""
    p = prep.profile
    lengths = Lengths(p.input_len, p.output_len)
    curves = Curves(prep.step_model, lengths)
    limit = max(1, min(p.engine.max_num_seqs, prep.kv_capacity_tokens // lengths.request_tokens_memory))

    def e2e(c: int) -> float:
        # Past the batch limit requests queue: a cycle lasts about c / limit times longer.
        return curves.e2e(min(c, limit)) * max(1.0, c / limit)

    return e2e


def level_timing(prep: Prepared, measure_s: float) -> Callable[[int], LevelTiming]:
    """Ramp-up over one predicted request lifetime, one more discarded, then ``measure_s`` measured."""
    e2e = predicted_e2e(prep)

    def timing(c: int) -> LevelTiming:
        t = e2e(c)
        return LevelTiming(RAMP_E2E * t, (RAMP_E2E + SETTLE_E2E) * t, measure_s)

    return timing


@dataclass
class Simulated:
    prepared: Prepared
    run: LadderRun
    result: dict[str, Any]
    wall_s: float

    @property
    def simulated_s(self) -> float:
        return sum((lv.stats.sim_end_ns - lv.window.start_ns) / 1e9 + lv.timing.warmup_s for lv in self.run.levels)


def _extension_note(run: LadderRun, extend: bool, cap: int, given_top: int) -> str | None:
    if not extend:
        return None
    s = run.summaries
    if run.extended:
        added = ", ".join(str(c) for c in run.extended)
        head = f"ladder extended past {given_top} with {added} while output throughput still grew ≥ 5 % per step"
    else:
        head = f"ladder not extended past {given_top}"
    top = run.concurrencies[-1]
    if next_ladder_step(top) > cap:
        return f"{head}; stopped at the cap of 2 x max_num_seqs = {cap}"
    if len(s) >= 2 and s[-2].output_tok_s > 0:
        gain = s[-1].output_tok_s / s[-2].output_tok_s - 1.0
        return f"{head}; stopped: {s[-2].level:g} -> {s[-1].level:g} added {gain:+.1%} output tok/s (< 5 %)"
    return head


def simulate_profile(
    prep: Prepared,
    *,
    levels: Sequence[int] | None = None,
    extend: bool | None = None,
    measure_s: float = 120.0,
    seed: int = 0,
    slo: Sequence[Objective] = (),
    settings: AnalysisSettings | None = None,
    extra_notes: Sequence[str] = (),
) -> Simulated:
    """Run the ladder for a prepared profile and build the result document ``knee find`` would build.

    ``levels`` None: the default ladder, extended (``extend`` None means: extend only the default ladder)
    with 96, 128, 192 ... while output throughput grows ≥ 5 % per step, up to 2 x max_num_seqs."""
    settings = settings or AnalysisSettings()
    given = list(levels) if levels is not None else list(DEFAULT_LADDER)
    do_extend = (levels is None) if extend is None else extend
    cap = 2 * prep.profile.engine.max_num_seqs
    t0 = time.perf_counter()
    run = simulate_ladder(
        prep.config,
        given,
        sampler_for=lambda i: _sampler(prep.profile, seed + i),
        timing_for=level_timing(prep, measure_s),
        seed=seed,
        slo=slo,
        extend=extend_while_climbing(cap, EXTEND_MIN_GAIN) if do_extend else None,
    )
    wall = time.perf_counter() - t0
    # The engine emits no TTFT histogram, so the client-vs-server TTFT gap (the only use of records
    # here) has nothing to compare; the queue and KV series are what the verdicts read.
    findings = telemetry_findings(run.telemetry, run.windows, [], local_server=False)
    rec = recommend(run.summaries, settings, exclude=findings.exclude, latency_extra=findings.latency_extra)
    e2e = predicted_e2e(prep)
    notes = [
        f"simulated, not measured: {measure_s:g} simulated s measured per level after a ramp-up and warm-up of "
        "two predicted request lifetimes"
    ]
    ext = _extension_note(run, do_extend, cap, given[-1])
    if ext:
        notes.append(ext)
    notes.extend(extra_notes)
    short = [c for c in run.concurrencies if 3 * e2e(c) > measure_s]
    if short:
        notes.append(
            "measured window shorter than three request lifetimes at level(s) "
            + ", ".join(str(c) for c in short)
            + " (raise --duration for firmer figures)"
        )
    preempted = [(c, n) for c, n in zip(run.concurrencies, run.preemptions, strict=True) if n]
    if preempted:
        notes.append(
            "KV cache ran out and requests were preempted (recomputed) at: "
            + ", ".join(f"{c} ({n})" for c, n in preempted)
        )
    clipped = [str(d) for d in (prep.profile.input_len, prep.profile.output_len) if d.kind == "normal"]
    if clipped:
        notes.append(f"normal length draws ({', '.join(clipped)}) are clipped at mean + {NORMAL_TAIL_Z:g} stdev")
    if prep.profile.engine.scheduling_policy != "fcfs":
        notes.append("every simulated request has the same priority, so priority scheduling acts as FCFS here")
    spec = {
        "target": prep.to_dict(),
        "workload": {"input_len": str(prep.profile.input_len), "output_len": str(prep.profile.output_len)},
        "load": {
            "mode": "closed",
            "levels": run.concurrencies,
            "measure_s": measure_s,
            "ramp_up_e2e": RAMP_E2E,
            "warmup_e2e": RAMP_E2E + SETTLE_E2E,
            "seed": seed,
        },
        "slo": ",".join(str(o) for o in slo) or None,
        "analysis": asdict(settings),
    }
    result = build_result(
        run.summaries,
        rec,
        spec=spec,
        notes=notes,
        final_drain_s=run.levels[-1].drain_s,
        telemetry=findings.per_level,
        verdicts=findings.verdicts_json(),
        telemetry_sources=findings.sources,
    )
    return Simulated(prep, run, result, wall)


def simulated_json(sim: Simulated) -> dict[str, Any]:
    """``knee analyze --json``'s object, marked as simulated and carrying the profile."""
    return {**analysis_json(sim.result), "simulated": True, "profile": sim.prepared.to_dict()}


def peak(sim: Simulated) -> tuple[float, float]:
    """(highest output tok/s, the concurrency it came at)."""
    best = max(sim.run.summaries, key=lambda s: s.output_tok_s)
    return best.output_tok_s, best.level


def comparison_row(value: Any, sim: Simulated) -> dict[str, Any]:
    a = sim.result["analysis"]
    tok_s, at = peak(sim)
    return {
        "value": value,
        "kv_capacity_tokens": sim.prepared.kv_capacity_tokens,
        "throughput_knee": a["throughput_knee"],
        "latency_knee": a["latency_knee"],
        "recommended_concurrency": a["recommended_concurrency"],
        "safe_concurrency": a["safe_concurrency"],
        "lower_bound": a["lower_bound"],
        "peak_output_tok_s": tok_s,
        "peak_at": at,
        "preemptions": sum(sim.run.preemptions),
    }


def comparison_table(knob: str, rows: Sequence[dict[str, Any]]) -> Table:
    """One row per knob value: where the knees land and the peak throughput (the rest is in --json)."""

    def g(v: Any) -> str:
        return "–" if v is None else f"{v:g}"

    table = Table(title=f"What-if: {knob}", header_style="bold")
    for name in ("value", "tput knee", "lat. knee", "recommended", "safe", "peak tok/s", "at"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(
            str(r["value"]),
            g(r["throughput_knee"]),
            g(r["latency_knee"]),
            g(r["recommended_concurrency"]) + ("+" if r["lower_bound"] else ""),
            g(r["safe_concurrency"]),
            f"{r['peak_output_tok_s']:,.0f}",
            g(r["peak_at"]),
        )
    table.caption = "+ = no knee reached, the limit is higher; at = concurrency of the peak"
    return table


# ---- command line ------------------------------------------------------------------------------------------


def _parse_list(option: str, text: str, parse: Callable[[str], Any]) -> list[Any]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"{option} is empty")
    out = []
    for p in parts:
        try:
            out.append(parse(p))
        except ValueError:
            raise ValueError(f"{option} {p!r} is not a valid {parse.__name__}") from None
    if len(set(out)) != len(out):
        raise ValueError(f"{option} {text!r} repeats a value")
    return out


def parse_ladder(text: str) -> list[int]:
    from llm_knee.commands.options import parse_levels

    levels = parse_levels(text)
    if any(not float(v).is_integer() for v in levels):
        raise ValueError(f"--levels are concurrencies (whole numbers of users), got {text}")
    return [int(v) for v in levels]


def _length(option: str, text: str) -> LengthDist:
    try:
        return parse_length(text)
    except ValueError as exc:
        raise ValueError(f"{option} {text!r}: {exc}") from None


def _fail(message: str) -> typer.Exit:
    # One line on stderr whatever the terminal width (rich would wrap a long catalog message).
    sys.stderr.write(f"error: {' '.join(message.split())}\n")
    return typer.Exit(EXIT_BAD_INPUT)


def simulate(
    model: Annotated[str, typer.Option(help="Model preset or local HF config.json / directory.")] = "Llama-3.1-8B",
    gpu: Annotated[str, typer.Option(help="GPU from the catalog, e.g. H100-SXM, A100-80G-SXM.")] = "H100-SXM",
    dtype: Annotated[str, typer.Option(help="Weight dtype: bf16, fp8, int8, int4, q4_k_m ...")] = "bf16",
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs.")] = 1,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="KV cache dtype (default: 16-bit).")] = None,
    input_len: Annotated[str, typer.Option(help="Prompt tokens: 512, normal:512,64 or uniform:256,768.")] = "512",
    output_len: Annotated[str, typer.Option(help="Output tokens, same forms as --input-len.")] = "256",
    levels: Annotated[
        str | None, typer.Option(help="Concurrency ladder (default: 1,2,4,8,12,16,20,24,32,40,48,64, extended).")
    ] = None,
    extend: Annotated[
        bool | None,
        typer.Option(
            "--extend/--no-extend",
            help="Add 96, 128, 192 ... while output tok/s grows ≥ 5 % per step, up to 2 x max_num_seqs "
            "(default: on for the default ladder, off with --levels).",
        ),
    ] = None,
    duration: Annotated[float, typer.Option(help="Measured simulated seconds per level (after warm-up).")] = 120.0,
    max_num_seqs: Annotated[str, typer.Option(help="Max sequences per step; a list (64,128,256) = what-if.")] = "256",
    max_num_batched_tokens: Annotated[str, typer.Option(help="Token budget per step (list: what-if).")] = "8192",
    enable_chunked_prefill: Annotated[bool, typer.Option(help="Split long prompts across steps.")] = True,
    gpu_memory_utilization: Annotated[str, typer.Option(help="Fraction of GPU memory for the engine.")] = "0.9",
    enable_prefix_caching: Annotated[bool, typer.Option(help="Cache the shared prompt prefix.")] = False,
    shared_prefix: Annotated[str, typer.Option(help="Tokens of prefix every prompt shares (list: what-if).")] = "0",
    prefix_hit_rate: Annotated[str, typer.Option(help="Fraction of requests whose prefix is cached.")] = "0",
    scheduling_policy: Annotated[str, typer.Option(help="fcfs or priority (list: what-if).")] = "fcfs",
    slo: Annotated[str | None, typer.Option(help="SLOs for goodput, e.g. ttft_p99=500ms,tpot_p50=50ms.")] = None,
    watermark: Annotated[float, typer.Option(help="Safe fraction of the recommendation (0.6–0.7).")] = 0.65,
    ttft_target: Annotated[float, typer.Option(help="TTFT P99 alarm threshold, ms.")] = 500.0,
    seed: Annotated[int, typer.Option(help="Seed for length draws and prefix hits.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON.")] = False,
) -> None:
    """Predict the knee offline: run the ladder through the simulated engine (no GPU, no server)."""
    console = Console(stderr=json_out)
    raw = {
        "--max-num-seqs": max_num_seqs,
        "--max-num-batched-tokens": max_num_batched_tokens,
        "--gpu-memory-utilization": gpu_memory_utilization,
        "--prefix-hit-rate": prefix_hit_rate,
        "--shared-prefix": shared_prefix,
        "--scheduling-policy": scheduling_policy,
    }
    try:
        values = {opt: _parse_list(opt, raw[opt], WHAT_IF_KNOBS[opt][1]) for opt in WHAT_IF_KNOBS}
        varied = [opt for opt, v in values.items() if len(v) > 1]
        if len(varied) > 1:
            raise ValueError(f"a what-if varies one knob at a time; got lists for {' and '.join(varied)}")
        base_engine = EngineConfig(
            enable_chunked_prefill=enable_chunked_prefill,
            enable_prefix_caching=enable_prefix_caching,
            **{WHAT_IF_KNOBS[opt][0]: v[0] for opt, v in values.items()},
        )
        base = Profile(
            model, gpu, dtype, tp, kv_cache_dtype,
            _length("--input-len", input_len), _length("--output-len", output_len), base_engine,
        )  # fmt: skip
        if not (math.isfinite(duration) and duration > 0):
            raise ValueError(f"--duration must be a positive number of simulated seconds, got {duration}")
        ladder = parse_ladder(levels) if levels is not None else None
        settings = AnalysisSettings(watermark=watermark, ttft_target_ms=ttft_target)
        objectives = parse_slo(slo) if slo else ()
        knob = varied[0] if varied else None
        points: list[tuple[Any, Profile]] = (
            [(v, replace(base, engine=replace(base_engine, **{WHAT_IF_KNOBS[knob][0]: v}))) for v in values[knob]]
            if knob
            else [(None, base)]
        )
        prepared = []
        for value, profile in points:
            try:
                prepared.append((value, prepare(profile)))
            except ValueError as exc:
                raise ValueError(f"{knob} {value}: {exc}" if knob else str(exc)) from None
    except (ValueError, OSError) as exc:
        raise _fail(str(exc)) from None

    def one(prep: Prepared, ladder: list[int] | None, extend: bool | None, notes: Sequence[str] = ()) -> Simulated:
        return simulate_profile(
            prep,
            levels=ladder,
            extend=extend,
            measure_s=duration,
            seed=seed,
            slo=objectives,
            settings=settings,
            extra_notes=notes,
        )

    runs = [(value, prep, one(prep, ladder, extend)) for value, prep in prepared]
    if knob:
        # The knee moves with the sweep range, so every value is judged on the same ladder: the longest one
        # (ladders grow along one rung sequence, so it contains the others).
        common = max((sim.run.concurrencies for _, _, sim in runs), key=len)
        note = (
            f"what-if: every {WHAT_IF_KNOBS[knob][0]} value runs the same ladder (up to {common[-1]}), "
            "so their knees compare like for like"
        )
        runs = [
            (v, prep, sim if sim.run.concurrencies == common else one(prep, common, False, [note]))
            for v, prep, sim in runs
        ]
    for value, prep, sim in runs:
        if knob:
            console.rule(f"{knob} {value}")
        console.print(f"[bold]Simulated, not measured[/] (no GPU, no server): {prep.describe()}")
        print_result(console, sim.result)
        console.print(
            f"[dim]{sim.simulated_s:,.0f} simulated seconds over {len(sim.run.levels)} levels in "
            f"{sim.wall_s:.1f} s wall.[/]"
        )
    if knob:
        rows = [comparison_row(v, s) for v, _, s in runs]
        console.print(comparison_table(WHAT_IF_KNOBS[knob][0], rows))
    if json_out:
        if knob:
            doc: dict[str, Any] = {
                "simulated": True,
                "what_if": WHAT_IF_KNOBS[knob][0],
                "comparison": [comparison_row(v, s) for v, _, s in runs],
                "results": {str(v): simulated_json(s) for v, _, s in runs},
            }
        else:
            doc = simulated_json(runs[0][2])
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
