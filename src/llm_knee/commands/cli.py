"""`knee find` and `knee analyze`."""

from __future__ import annotations

import asyncio
import secrets
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import orjson
import typer
from rich.console import Console

from llm_knee.analysis.recommend import AnalysisSettings
from llm_knee.analysis.slo import parse_slo
from llm_knee.commands.embedded import (
    DEMO_LEVELS,
    DEMO_MAX_DURATION_S,
    DEMO_MIN_DURATION_S,
    DEMO_STABILITY_WINDOW_S,
)
from llm_knee.commands.launch import check_template, parse_assignments
from llm_knee.commands.options import parse_levels

EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130


def _fail(console: Console, message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


def _length(option: str, text: str) -> Any:
    from llm_knee.workload.lengths import parse as parse_length

    try:
        return parse_length(text)
    except ValueError as exc:
        raise ValueError(f"{option} {text!r}: {exc}") from None


def _print_json(result: dict[str, Any]) -> None:
    from llm_knee.report.result import analysis_json

    sys.stdout.write(orjson.dumps(analysis_json(result), option=orjson.OPT_INDENT_2).decode() + "\n")


def _run_async(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # uvloop is optional on platforms without it
        return asyncio.run(coro)


def find(
    url: Annotated[
        str | None, typer.Option("--url", help="Server root, e.g. http://127.0.0.1:8000 (with or without /v1).")
    ] = None,
    api: Annotated[str, typer.Option(help="API family: completions or chat.")] = "completions",
    model: Annotated[
        str | None, typer.Option(help="Model name; default: the first of the server's /v1/models.")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar=["KNEE_API_KEY", "OPENAI_API_KEY"], help="Bearer token (or env KNEE_API_KEY).")
    ] = None,
    input_len: Annotated[str, typer.Option(help="Prompt tokens: 512, normal:512,64 or uniform:256,768.")] = "512",
    output_len: Annotated[str, typer.Option(help="Output tokens, same forms as --input-len.")] = "256",
    prompt_file: Annotated[
        Path | None, typer.Option(help='JSONL prompts: {"prompt"|"messages", "output_tokens"?}.')
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="tokenizer.json or a HF tokenizer dir, for exact prompt lengths.")
    ] = None,
    shared_prefix: Annotated[int, typer.Option(help="Tokens of common prefix on every prompt (0 = all unique).")] = 0,
    levels: Annotated[
        str | None, typer.Option(help="Concurrency ladder (or rates with --rate), e.g. 1,2,4,8,16.")
    ] = None,
    rate: Annotated[bool, typer.Option("--rate", help="Open loop: levels are arrival rates in req/s.")] = False,
    arrival: Annotated[str, typer.Option(help="Open loop arrivals: poisson or constant.")] = "poisson",
    max_duration: Annotated[
        float | None, typer.Option(help="Max measured seconds per level [default: 60; 8 for the embedded demo].")
    ] = None,
    min_duration: Annotated[
        float | None, typer.Option(help="Min measured seconds before a level may end steady [default: 10; demo 3].")
    ] = None,
    warmup: Annotated[float, typer.Option(help="Min warm-up seconds per level (discarded).")] = 0.0,
    warmup_requests: Annotated[int, typer.Option(help="Requests sent one by one before the ladder (discarded).")] = 2,
    stability_cv: Annotated[
        float, typer.Option(help="Steady when the last 3 window rates vary by at most this CV.")
    ] = 0.05,
    stability_window: Annotated[
        float | None, typer.Option(help="Seconds per throughput window for steady state [default: 2; demo 1].")
    ] = None,
    max_requests: Annotated[int | None, typer.Option(help="Stop a level after this many measured requests.")] = None,
    connect_timeout: Annotated[float, typer.Option(help="Seconds to connect.")] = 10.0,
    first_token_timeout: Annotated[float, typer.Option(help="Seconds from send to the first token.")] = 120.0,
    timeout: Annotated[float, typer.Option(help="Seconds from send to the end of a request.")] = 600.0,
    ignore_eos: Annotated[bool, typer.Option(help="Ask for exactly N tokens (ignore_eos, min_tokens).")] = True,
    slo: Annotated[str | None, typer.Option(help="SLOs for goodput, e.g. ttft_p99=500ms,tpot_p50=50ms.")] = None,
    error_budget: Annotated[float, typer.Option(help="Max error fraction at a recommended level.")] = 0.0,
    watermark: Annotated[float, typer.Option(help="Safe fraction of the recommendation (0.6–0.7).")] = 0.65,
    ttft_target: Annotated[float, typer.Option(help="TTFT P99 alarm threshold, ms.")] = 500.0,
    out: Annotated[Path, typer.Option(help="Where run directories are created.")] = Path("knee-runs"),
    label: Annotated[str, typer.Option(help="Suffix for the run directory name.")] = "",
    resume: Annotated[Path | None, typer.Option(help="Continue an interrupted run directory.")] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed for prompts and arrivals [default: a new one per run, kept in spec.json; a server's "
            "prompt cache would serve a repeated run's identical prompts and make TTFT look too good]."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON at the end.")] = False,
    quiet: Annotated[bool, typer.Option(help="No live progress.")] = False,
    launch: Annotated[
        str | None, typer.Option(help="Engine command template with {port} (and --grid/--set keys) to start per point.")
    ] = None,
    grid: Annotated[list[str] | None, typer.Option(help="Engine knob values, e.g. slots=4,8,16 (repeatable).")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Fixed template value, e.g. model=tiny.gguf (repeatable).")
    ] = None,
    launch_timeout: Annotated[float, typer.Option(help="Seconds for a launched engine to become healthy.")] = 120.0,
    launch_health: Annotated[str, typer.Option(help="Health path of a launched engine.")] = "/health",
    telemetry: Annotated[bool, typer.Option(help="Sample GPU, host, server /metrics and client lag.")] = True,
    telemetry_interval: Annotated[float, typer.Option(help="Seconds between telemetry samples.")] = 1.0,
) -> None:
    """Sweep concurrency (or rate) against an OpenAI-compatible server, find the knee, recommend a limit."""
    from llm_knee.client.config import ClientConfig
    from llm_knee.client.errors import KneeClientError, TargetError
    from llm_knee.commands.find import FindPlan, Interrupted, plan_from_spec, run_find
    from llm_knee.load.settings import DEFAULT_LADDER, LoadSettings
    from llm_knee.records.store import RunStore, RunStoreError
    from llm_knee.report.console import print_result
    from llm_knee.workload.spec import WorkloadSpec

    console = Console(stderr=json_out)
    store = None
    embedded = False
    try:
        if resume is not None:
            store = RunStore.open(resume)
            spec = store.read_spec()
            plan = plan_from_spec(spec, api_key)
            # A run of the embedded engine resumes against a new embedded engine: the old one is gone.
            embedded = str((spec.get("target") or {}).get("note", "")).startswith("embedded simulated engine")
            # Durations may be changed for the rest of the run; what was measured stays as it was.
            if max_duration is not None or min_duration is not None:
                new_max = plan.load.max_duration_s if max_duration is None else max_duration
                new_min = min(plan.load.min_duration_s if min_duration is None else min_duration, new_max)
                plan = replace(plan, load=replace(plan.load, max_duration_s=new_max, min_duration_s=new_min))
        else:
            if seed is None:
                seed = secrets.randbelow(2**31)
            if telemetry_interval <= 0:
                raise ValueError(f"--telemetry-interval must be a positive number of seconds, got {telemetry_interval}")
            if launch is not None:
                if url is not None:
                    raise ValueError("--launch starts its own engine on a free port: leave out --url")
                launch_grid = parse_assignments(grid or [], "--grid")
                launch_sets = parse_assignments(set_ or [], "--set")
                for key, values in launch_sets.items():
                    if len(values) != 1:
                        raise ValueError(f"--set {key} takes one value; use --grid {key}=... to try several")
                check_template(launch, launch_grid, launch_sets)
                url = "http://127.0.0.1:1"  # replaced by each launched engine's own address
            elif grid or set_:
                raise ValueError("--grid and --set fill a --launch template; give --launch too")
            embedded = url is None
            if embedded:
                url = "http://127.0.0.1:1"  # replaced by the embedded engine's own address once it runs
                levels = levels or ",".join(f"{x:g}" for x in DEMO_LEVELS)
                max_duration = DEMO_MAX_DURATION_S if max_duration is None else max_duration
                min_duration = DEMO_MIN_DURATION_S if min_duration is None else min_duration
                stability_window = DEMO_STABILITY_WINDOW_S if stability_window is None else stability_window
                label = label or "serve-sim"
            assert url is not None
            mode: Literal["closed", "open"] = "open" if rate else "closed"
            if rate and levels is None:
                raise ValueError("--rate needs --levels with the arrival rates to try, e.g. --levels 1,2,4,8")
            if arrival not in ("poisson", "constant"):
                raise ValueError(f"--arrival must be poisson or constant, got {arrival!r}")
            load = LoadSettings(
                mode=mode,
                levels=parse_levels(levels) if levels else DEFAULT_LADDER,
                arrival=cast(Literal["poisson", "constant"], arrival),
                max_duration_s=60.0 if max_duration is None else max_duration,
                min_duration_s=min(
                    10.0 if min_duration is None else min_duration, 60.0 if max_duration is None else max_duration
                ),
                warmup_s=warmup,
                warmup_max_s=max(60.0, warmup),
                warmup_requests=warmup_requests,
                stability_cv=stability_cv,
                stability_window_s=2.0 if stability_window is None else stability_window,
                max_requests_per_level=max_requests,
                seed=seed,
            )
            if api not in ("completions", "chat"):
                raise ValueError(f"--api must be completions or chat, got {api!r}")
            workload = WorkloadSpec(
                input_len=_length("--input-len", input_len),
                output_len=_length("--output-len", output_len),
                api=cast(Literal["completions", "chat"], api),
                # Absolute, so that `--resume` works from any directory.
                prompt_file=prompt_file.resolve() if prompt_file else None,
                tokenizer=str(Path(tokenizer).resolve()) if tokenizer and Path(tokenizer).exists() else tokenizer,
                shared_prefix_tokens=shared_prefix,
                seed=seed,
            )
            client = ClientConfig(
                base_url=url, api=cast(Literal["completions", "chat"], api), model=model, api_key=api_key,
                connect_timeout_s=connect_timeout, first_token_timeout_s=first_token_timeout,
                total_timeout_s=timeout, ignore_eos=ignore_eos,
            )  # fmt: skip
            plan = FindPlan(
                client=client,
                workload=workload,
                load=load,
                analysis=AnalysisSettings(error_budget=error_budget, watermark=watermark, ttft_target_ms=ttft_target),
                slo=parse_slo(slo) if slo else (),
                slo_text=slo,
                out_dir=out,
                label=label,
                telemetry=telemetry,
                telemetry_interval_s=telemetry_interval,
            )
        # Validate the workload (tokenizer, prompt file) before any request is sent.
        from llm_knee.workload.prompts import PromptSource

        PromptSource(plan.workload)
    except (ValueError, KneeClientError, RunStoreError, OSError) as exc:
        raise _fail(console, str(exc)) from None

    if launch is not None:
        _launch_grid(
            plan, launch, launch_grid, {k: v[0] for k, v in launch_sets.items()}, console,
            quiet=quiet, startup_timeout_s=launch_timeout, health_path=launch_health, json_out=json_out,
        )  # fmt: skip
        return
    sim = None
    if embedded:
        from llm_knee.commands.embedded import PROFILE_TEXT, start_embedded_sim
        from llm_knee.engines.errors import EngineStartError

        try:
            sim, sim_url = start_embedded_sim(plan.out_dir)
        except EngineStartError as exc:
            raise _fail(console, f"the embedded simulated engine did not start: {exc}", 1) from None
        console.print(
            f"[bold]No --url given:[/] measuring the embedded simulated engine at {sim_url} — {PROFILE_TEXT}. "
            "These are simulated numbers for that profile; point --url at your server to measure it."
        )
        plan = replace(
            plan,
            client=replace(plan.client, base_url=sim_url),
            target_note=f"embedded simulated engine (serve-sim): {PROFILE_TEXT}",
        )
    try:
        store, result = _run_async(run_find(plan, console, resume=store, show=not quiet))
    except TargetError as exc:
        raise _fail(console, str(exc), EXIT_UNREACHABLE) from None
    except Interrupted as exc:
        if sim is not None:
            sim.stop()
        console.print("[yellow]Interrupted: every completed request is on disk.[/]")
        if exc.result is not None:
            print_result(console, exc.result)
            if json_out:
                _print_json(exc.result)
        console.print(f"Partial run in {exc.store.path}; continue with: knee find --resume {exc.store.path}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if sim is not None:
            sim.stop()
    print_result(console, result)
    console.print(f"Reports: {store.path}/result.json, levels.csv, report.md")
    if json_out:
        _print_json(result)


def _launch_grid(
    plan: Any,
    template: str,
    grid: dict[str, list[str]],
    sets: dict[str, str],
    console: Console,
    *,
    quiet: bool,
    startup_timeout_s: float,
    health_path: str,
    json_out: bool,
) -> None:
    from dataclasses import replace
    from datetime import UTC, datetime

    from llm_knee.client.errors import TargetError
    from llm_knee.commands.find import Interrupted, run_find
    from llm_knee.commands.launch import (
        PointOutcome,
        best_point,
        client_for,
        comparison_table,
        grid_points,
        launch_point,
    )
    from llm_knee.engines.errors import EngineStartError
    from llm_knee.report.console import print_result

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    outcomes: list[PointOutcome] = []
    interrupted = False
    for values in grid_points(grid):
        outcome = PointOutcome(values)
        outcomes.append(outcome)
        tag = "-".join(f"{k}{v}" for k, v in values.items()) or "engine"
        tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)
        console.rule(f"engine point {outcome.label}")
        try:
            proc, base = launch_point(
                template, {**sets, **values}, log_path=plan.out_dir / f"engine-{stamp}-{tag}.log",
                health_path=health_path, startup_timeout_s=startup_timeout_s,
            )  # fmt: skip
        except EngineStartError as exc:
            outcome.error = str(exc)
            console.print(f"[bold red]engine failed to start:[/] {exc}")
            continue
        except KeyboardInterrupt:
            interrupted = True
            break
        try:
            point_plan = replace(plan, client=client_for(plan.client, base), label=tag)
            store, result = _run_async(run_find(point_plan, console, show=not quiet))
            outcome.run_dir, outcome.result = store.path, result
            print_result(console, result)
        except TargetError as exc:
            outcome.error = f"{exc}\nengine log (last lines):\n{proc.log_tail()}"
            console.print(f"[bold red]error:[/] {outcome.error}")
        except Interrupted as exc:
            outcome.run_dir, outcome.result, outcome.error = exc.store.path, exc.result, "interrupted"
            interrupted = True
        finally:
            proc.stop()
        if interrupted:
            break
    console.print(comparison_table(outcomes))
    best = best_point(outcomes)
    if best is not None:
        console.print(f"Best point: [bold]{best.label}[/] ({best.tok_s_at_recommendation():.0f} tok/s at its "
                      f"recommended load).")  # fmt: skip
    summary = {"template": template, "grid": grid, "set": sets, "points": [o.to_dict() for o in outcomes],
               "best": None if best is None else best.values}  # fmt: skip
    path = plan.out_dir / f"grid-{stamp}.json"
    path.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    console.print(f"Grid summary: {path}")
    if json_out:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if all(o.error is not None for o in outcomes):
        raise typer.Exit(1)


def analyze(
    path: Annotated[Path, typer.Argument(help="A run directory, or a CSV with concurrency,throughput,ttft_p99[,...].")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the analysis as one JSON object.")] = False,
    error_budget: Annotated[float | None, typer.Option(help="Max error fraction at a recommended level.")] = None,
    watermark: Annotated[float | None, typer.Option(help="Safe fraction of the recommendation (0.6–0.7).")] = None,
    ttft_target: Annotated[float | None, typer.Option(help="TTFT P99 alarm threshold, ms.")] = None,
    slo: Annotated[str | None, typer.Option(help="SLOs, e.g. ttft_p99=500ms (run directories only).")] = None,
    write: Annotated[bool, typer.Option(help="Rewrite the run directory's reports.")] = True,
) -> None:
    """Judge numbers you already have: a run directory (recomputed from its records) or a CSV table."""
    from llm_knee.commands.analyze import analyze_store, analyze_table, settings_from_spec
    from llm_knee.records.store import RunStore, RunStoreError
    from llm_knee.records.table_import import TableError
    from llm_knee.report.console import print_result
    from llm_knee.report.files import write_reports

    console = Console(stderr=json_out)
    overrides = {"error_budget": error_budget, "watermark": watermark, "ttft_target_ms": ttft_target}
    try:
        if path.is_dir():
            store = RunStore.open(path)
            settings = settings_from_spec(store.read_spec(), overrides)
            result = analyze_store(store, settings=settings, slo=parse_slo(slo) if slo else None)
            if write:
                write_reports(store, result)
        elif path.is_file():
            if slo:
                raise ValueError("--slo needs per-request records: give a run directory, not a CSV table")
            result = analyze_table(path, settings_from_spec({}, overrides))
        else:
            raise ValueError(f"{path} does not exist: give a run directory or a CSV file")
    except (ValueError, RunStoreError, TableError) as exc:
        raise _fail(console, str(exc)) from None
    if json_out:
        _print_json(result)
    else:
        print_result(console, result)


def register(app: typer.Typer) -> None:
    app.command("find")(find)
    app.command("analyze")(analyze)
