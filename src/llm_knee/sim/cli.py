"""`knee serve-sim`: run the simulated engine behind an OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from llm_knee.sim.config import EngineConfig
from llm_knee.sim.faults import FaultConfig, load_fault_file, parse_rates
from llm_knee.sim.server import ServeSimSettings, SimServer, serve

EXIT_BAD_INPUT = 2


def banner(server: SimServer, host: str, port: int) -> str:
    d = server.describe()
    e = server.settings.engine
    f = server.settings.faults
    faults = ", ".join(f"{k}={v:g}" for k, v in f.error_rates.items() if v) or "none"
    if f.stall_ms:
        faults += f"; stall {f.stall_ms:g} ms every {f.stall_every_s:g} s"
    if f.oom_crash:
        faults += "; exit with CUDA OOM when KV runs out"
    return "\n".join(
        (
            f"serve-sim: {d['model']} {d['dtype']} on {d['tp']} x {d['gpu']} (simulated), "
            f"served as {d['served_model_name']!r}",
            f"  KV cache   {d['kv_capacity_tokens']:,} tokens ({d['kv_blocks']:,} blocks of {d['block_size']}), "
            f"max_model_len {d['max_model_len']:,}",
            f"  scheduler  max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_num_batched_tokens}, "
            f"chunked prefill {'on' if e.enable_chunked_prefill else 'off'}, "
            f"prefix caching {'on' if e.enable_prefix_caching else 'off'}, policy {e.scheduling_policy}",
            f"  time       {server.settings.speed:g}x real time; faults: {faults}",
            "  prompts    tokens = whitespace-separated words (or header x-sim-prompt-tokens); "
            "exactly max_tokens generated",
            f"  endpoints  http://{host}:{port}/v1 (completions, chat/completions, models), /health, /metrics, "
            "/sim/truth?id=, /sim/stats",
        )
    )


def _run(settings: ServeSimSettings, host: str, port: int, loop_kind: str) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(server: SimServer, bound: int) -> None:
            sys.stdout.write(f"PORT {bound}\n{banner(server, host, bound)}\n")
            sys.stdout.flush()

        await serve(settings, host, port, ready=ready, stop=stop)

    if loop_kind == "asyncio":
        asyncio.run(main())
        return
    try:
        import uvloop
    except ImportError:
        if loop_kind == "uvloop":
            raise
        asyncio.run(main())
        return
    uvloop.run(main())


def serve_sim(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: a free one, printed as 'PORT <n>').")] = 0,
    model: Annotated[str, typer.Option(help="Model preset or local HF config.json / directory.")] = "Llama-3.1-8B",
    gpu: Annotated[str, typer.Option(help="GPU from the catalog, e.g. H100-SXM, A100-80G-SXM.")] = "H100-SXM",
    dtype: Annotated[str, typer.Option(help="Weight dtype: bf16, fp8, int8, int4, q4_k_m ...")] = "bf16",
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs.")] = 1,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="KV cache dtype (default: 16-bit).")] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Model name clients send (default: --model).")] = None,
    max_num_seqs: Annotated[int, typer.Option(help="Max sequences per step.")] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option(help="Token budget per step.")] = 8192,
    enable_chunked_prefill: Annotated[bool, typer.Option(help="Split long prompts across steps.")] = True,
    block_size: Annotated[int, typer.Option(help="KV block size in tokens.")] = 16,
    gpu_memory_utilization: Annotated[float, typer.Option(help="Fraction of GPU memory for the engine.")] = 0.9,
    enable_prefix_caching: Annotated[bool, typer.Option(help="Shared-prefix hits skip prefill.")] = False,
    prefix_hit_rate: Annotated[float, typer.Option(help="Fraction of requests whose prefix is cached.")] = 0.0,
    shared_prefix_tokens: Annotated[int, typer.Option(help="Length of the shared prefix, tokens.")] = 0,
    scheduling_policy: Annotated[str, typer.Option(help="fcfs or priority (body field 'priority').")] = "fcfs",
    max_model_len: Annotated[int | None, typer.Option(help="Cap on prompt + output tokens.")] = None,
    speed: Annotated[float, typer.Option(help="Time scale: 2 runs twice as fast as real time.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed for faults, prefix hits and ids.")] = 0,
    default_max_tokens: Annotated[int, typer.Option(help="max_tokens when a request gives none.")] = 16,
    error_rate: Annotated[
        list[str] | None,
        typer.Option(help="Fault rate CLASS=P (repeatable): http_5xx, http_4xx, reset, malformed, disconnect."),
    ] = None,
    disconnect_rate: Annotated[float, typer.Option(help="Fraction of requests cut mid-stream (FIN).")] = 0.0,
    stall_ms: Annotated[float, typer.Option(help="Freeze every stream for this many ms ...")] = 0.0,
    stall_every_s: Annotated[float, typer.Option(help="... every this many seconds.")] = 0.0,
    oom_crash: Annotated[bool, typer.Option(help="Exit with a CUDA OOM message when KV runs out.")] = False,
    faults_config: Annotated[
        Path | None, typer.Option(help="TOML/JSON file of fault settings (FaultConfig fields); CLI options win.")
    ] = None,
    truth_keep: Annotated[int, typer.Option(help="Requests whose ground truth is kept for /sim/truth.")] = 4096,
    loop: Annotated[str, typer.Option(help="Event loop: auto (uvloop when installed), uvloop or asyncio.")] = "auto",
) -> None:
    """Serve a simulated engine (OpenAI-compatible) whose token timing comes from the engine model."""
    try:
        fault_fields: dict[str, Any] = load_fault_file(faults_config) if faults_config else {}
        rates = dict(fault_fields.get("error_rates", {}))
        rates.update(parse_rates(error_rate or []))
        if disconnect_rate:
            rates["disconnect"] = disconnect_rate
        fault_fields["error_rates"] = rates
        if stall_ms:
            fault_fields["stall_ms"] = stall_ms
        if stall_every_s:
            fault_fields["stall_every_s"] = stall_every_s
        if oom_crash:
            fault_fields["oom_crash"] = True
        faults = FaultConfig(**fault_fields)
        engine = EngineConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_chunked_prefill=enable_chunked_prefill,
            block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=enable_prefix_caching,
            prefix_hit_rate=prefix_hit_rate,
            shared_prefix_tokens=shared_prefix_tokens,
            scheduling_policy=scheduling_policy,
            max_model_len=max_model_len,
        )
        engine.validate()
        if loop not in ("auto", "uvloop", "asyncio"):
            raise ValueError(f"--loop must be auto, uvloop or asyncio (got {loop!r})")
        if default_max_tokens < 1:
            raise ValueError(f"--default-max-tokens must be at least 1 (got {default_max_tokens})")
        settings = ServeSimSettings(
            model=model,
            gpu=gpu,
            dtype=dtype,
            tp=tp,
            kv_dtype=kv_cache_dtype,
            served_model_name=served_model_name,
            engine=engine,
            faults=faults,
            speed=speed,
            seed=seed,
            default_max_tokens=default_max_tokens,
            truth_keep=truth_keep,
        )
        # Build once here so bad names and models that do not fit fail before the port opens.
        from llm_knee.sim.server import build_realtime

        build_realtime(settings)
    except (ValueError, OSError, TypeError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    _run(settings, host, port, loop)


def register(app: typer.Typer) -> None:
    app.command("serve-sim")(serve_sim)


def main() -> None:
    """Run the command alone, without the rest of `knee`: ``python -m llm_knee.sim.cli --port 0 ...``."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)  # the only command, so typer runs it without its name
    app()


if __name__ == "__main__":
    main()
