"""`knee plan`: capacity arithmetic before any load test. Thin: parse, call the planner, print.

Bad input (unknown model or GPU, a model that does not fit, a context beyond the model's, bad lengths,
efficiency or SLO) ends with one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from llm_knee.catalog import get_dtype, get_gpu, get_model
from llm_knee.catalog.hardware import GIB
from llm_knee.plan.roofline import DoesNotFitError

EXIT_BAD_INPUT = 2


def _prices(text: str | None, n: int) -> list[float | None]:
    if text is None:
        return [None] * n
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"--price-per-gpu-hour must be a number or one per card, got {text!r}") from None
    if any(not v >= 0 for v in values):
        raise ValueError(f"--price-per-gpu-hour must be >= 0, got {text!r}")
    if len(values) == 1:
        return [values[0]] * n
    if len(values) != n:
        raise ValueError(f"--price-per-gpu-hour has {len(values)} prices for {n} cards: give one, or one per card")
    return list(values)


def _write_json(doc: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


def plan(
    model: Annotated[str, typer.Option(help="Model preset (e.g. llama-3.1-8b) or a local HF dir / config.json.")],
    gpu: Annotated[str, typer.Option(help="Card, e.g. h100; a comma list compares cards (a100-80g,h100-sxm,l40s).")],
    dtype: Annotated[str, typer.Option(help="Weights: bf16, fp16, fp8, int8, int4, q8_0, q4_k_m.")] = "bf16",
    kv_cache_dtype: Annotated[
        str | None, typer.Option(help="KV cache dtype (default: 16-bit, as engines keep it).")
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs you have (a multiple of --tp): their QPS is shown.")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel GPUs per replica (default 1).")] = None,
    input_len: Annotated[str, typer.Option(help="Prompt tokens: 512, normal:512,64 or uniform:256,768.")] = "512",
    output_len: Annotated[str, typer.Option(help="Output tokens, same forms as --input-len.")] = "256",
    gpu_memory_utilization: Annotated[
        float | None, typer.Option(help="Fraction of GPU memory the engine may use (default 0.9; 1.0 on edge).")
    ] = None,
    os_reserve_gib: Annotated[
        float | None, typer.Option(help="Unified memory only: GiB kept by the OS and CPU (default 6).")
    ] = None,
    target_qps: Annotated[float | None, typer.Option(help="Requests per second the fleet must serve.")] = None,
    slo: Annotated[
        str | None, typer.Option(help="Targets, e.g. ttft=500ms,tok_s_per_user=30 (also ttft_p99=, tpot=, e2e=).")
    ] = None,
    efficiency: Annotated[
        float | None, typer.Option(help="Fleet efficiency in (0, 1] (default 0.6; 0.45 with a P99 SLO).")
    ] = None,
    price_per_gpu_hour: Annotated[
        str | None, typer.Option(help="$ per GPU-hour; with several cards one price or one per card.")
    ] = None,
    explain: Annotated[bool, typer.Option("--explain", help="Print every figure with its formula and inputs.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print all figures as one JSON object.")] = False,
    simulate: Annotated[
        bool, typer.Option("--simulate", help="Also run the ladder through the engine simulator and show its knee.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed for --simulate.")] = 0,
) -> None:
    """How many users per GPU, and how many GPUs: memory, speed, knee and fleet, with the arithmetic shown."""
    from dataclasses import replace

    from llm_knee.plan.compare import compare_gpus
    from llm_knee.plan.inputs import Lengths, parse_plan_slo
    from llm_knee.plan.planner import PlanRequest, make_plan
    from llm_knee.plan.render import compare_table, print_explain, print_plan

    console = Console(stderr=json_out)
    err = Console(stderr=True)
    names = [g.strip() for g in gpu.split(",") if g.strip()]
    try:
        if not names:
            raise ValueError("--gpu is empty: name a card, e.g. --gpu h100")
        cards = [get_gpu(n) for n in names]
        base = PlanRequest(
            model=get_model(model),
            gpu=cards[0],
            dtype=get_dtype(dtype),
            lengths=Lengths.parse(input_len, output_len),
            slo=parse_plan_slo(slo),
            kv_dtype=get_dtype(kv_cache_dtype) if kv_cache_dtype else None,
            tp=1 if tp is None else tp,
            gpus=gpus,
            gpu_memory_utilization=gpu_memory_utilization,
            os_reserve_bytes=None if os_reserve_gib is None else os_reserve_gib * GIB,
            target_qps=target_qps,
            efficiency=efficiency,
            price_per_gpu_hour=None,
        )
        prices = _prices(price_per_gpu_hour, len(cards))
        if tp is not None and tp < 1:
            raise ValueError(f"--tp must be >= 1, got {tp}")
        if len(cards) > 1:
            if simulate:
                raise ValueError("--simulate plans one card at a time: give a single --gpu")
            if gpus is not None:
                raise ValueError("--gpus applies to one card: drop it when comparing cards")
            rows = compare_gpus(base, cards, prices, auto_tp=tp is None)
            if json_out:
                _write_json({"compare": [r.to_dict() for r in rows]})
                return
            console.print(compare_table(rows, target_qps))
            if explain:
                for r in rows:
                    if r.plan is not None:
                        console.print(f"[bold]{r.gpu}[/]")
                        print_explain(console, r.plan.figures())
            return
        result = make_plan(replace(base, price_per_gpu_hour=prices[0]))
        sim = None
        if simulate:
            from llm_knee.plan.simulate import simulate_plan

            sim = simulate_plan(result, seed=seed)
    except DoesNotFitError as exc:
        if json_out:
            _write_json(
                {"fits": False, "error": str(exc), "shortfall_gib": exc.shortfall_gib, "options": exc.suggestions}
            )
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if json_out:
        doc = result.to_dict()
        doc["simulation"] = None if sim is None else sim.to_dict()
        _write_json(doc)
        return
    print_plan(console, result, sim, explain=explain)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
