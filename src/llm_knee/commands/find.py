"""`knee find`: check the target, sweep the ladder, write every record, analyse, report."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from llm_knee import __version__
from llm_knee.analysis.recommend import AnalysisSettings
from llm_knee.analysis.slo import Objective
from llm_knee.client.config import ClientConfig
from llm_knee.client.openai import OpenAIClient
from llm_knee.commands.analyze import analyze_store
from llm_knee.load.driver import Live
from llm_knee.load.prefetch import PrefetchedPrompts
from llm_knee.load.settings import LoadSettings
from llm_knee.load.sweep import SweepState, completed_level_indices, run_sweep
from llm_knee.records.schema import RequestRecord
from llm_knee.records.store import RunStore, SessionAnchor
from llm_knee.report.files import write_reports
from llm_knee.report.progress import show_progress
from llm_knee.telemetry.sampler import TelemetryCollector, default_samplers
from llm_knee.workload.prompts import Prompt, PromptSource
from llm_knee.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class FindPlan:
    client: ClientConfig
    workload: WorkloadSpec
    load: LoadSettings
    analysis: AnalysisSettings
    slo: tuple[Objective, ...] = ()
    slo_text: str | None = None
    out_dir: Path = Path("knee-runs")
    label: str = ""
    telemetry: bool = True
    telemetry_interval_s: float = 1.0
    target_note: str | None = None  # e.g. that the target is the embedded simulated engine

    def spec(self) -> dict[str, Any]:
        c = self.client
        return {
            "tool_version": __version__,
            "target": {
                "base_url": c.base_url, "api": c.api, "model": c.model, "ignore_eos": c.ignore_eos,
                "connect_timeout_s": c.connect_timeout_s, "first_token_timeout_s": c.first_token_timeout_s,
                "total_timeout_s": c.total_timeout_s, "extra_body": dict(c.extra_body),
                "api_key_set": c.api_key is not None,
                **({"note": self.target_note} if self.target_note else {}),
            },
            "workload": self.workload.to_dict(),
            "load": self.load.to_dict(),
            "analysis": asdict(self.analysis),
            "slo": self.slo_text,
        }  # fmt: skip


def plan_from_spec(spec: dict[str, Any], api_key: str | None) -> FindPlan:
    """Rebuild what a run was asked to do from its spec (for --resume). The API key is never stored."""
    from llm_knee.analysis.slo import parse_slo
    from llm_knee.commands.analyze import settings_from_spec

    t = spec["target"]
    client = ClientConfig(
        base_url=t["base_url"], api=t["api"], model=t.get("model"), api_key=api_key, ignore_eos=t["ignore_eos"],
        connect_timeout_s=t["connect_timeout_s"], first_token_timeout_s=t["first_token_timeout_s"],
        total_timeout_s=t["total_timeout_s"], extra_body=t.get("extra_body") or {},
    )  # fmt: skip
    slo_text = spec.get("slo")
    return FindPlan(
        client=client,
        workload=WorkloadSpec.from_dict(spec["workload"]),
        load=LoadSettings.from_dict(spec["load"]),
        analysis=settings_from_spec(spec),
        slo=parse_slo(slo_text) if slo_text else (),
        slo_text=slo_text,
    )


class Interrupted(Exception):
    """The sweep was stopped by SIGINT/SIGTERM; ``result`` holds the partial result."""

    def __init__(self, store: RunStore, result: dict[str, Any] | None) -> None:
        super().__init__("interrupted")
        self.store = store
        self.result = result


def _sender(client: OpenAIClient) -> Any:
    async def send(prompt: Prompt, record: RequestRecord, live: Live) -> RequestRecord:
        await client.send(prompt.text, prompt.messages, prompt.output_tokens, record, on_token=live)
        return record

    return send


async def run_find(
    plan: FindPlan, console: Console, *, resume: RunStore | None = None, show: bool = True
) -> tuple[RunStore, dict[str, Any]]:
    """Run (or resume) a sweep and return the run directory and its result document.

    Raises the client's TargetUnreachable (nothing written) when the target cannot be reached, and
    Interrupted (partial result written) on SIGINT/SIGTERM.
    """
    load = plan.load
    concurrency = int(max(load.levels)) if load.mode == "closed" else load.max_in_flight
    # The anchor is taken before the client exists so that every record shares it.
    anchor_perf = time.perf_counter_ns()
    async with OpenAIClient(plan.client, anchor_perf, concurrency=concurrency) as client:
        model = await client.check_target()
        if resume is None:
            spec = plan.spec()
            spec["target"]["model"] = plan.client.model or model
            store = RunStore.create(plan.out_dir, spec, plan.label)
            start = 0
        else:
            store = resume
            done = completed_level_indices(store)
            start = next((i for i in range(len(load.levels)) if i not in done), len(load.levels))
        anchor = store.new_session()
        client.anchor_ns = anchor.perf_ns
        if start >= len(load.levels):
            console.print(f"[green]Every level of {store.path} is already measured; re-analysing it.[/]")
        else:
            # Each session draws new prompts, so a resumed run does not replay cached prompts.
            source = PromptSource(replace(plan.workload, seed=plan.workload.seed + 1_000_003 * anchor.session))
            # Enough for every user's next request (closed loop) or ~2 s of arrivals (open loop).
            ahead = 2 * concurrency if load.mode == "closed" else int(2 * max(load.levels))
            prompts = PrefetchedPrompts(source, depth=min(ahead, 4096) + 64).start()
            console.print(
                f"[bold]knee find[/] → {plan.client.endpoint_url} (model {client.model or model}); "
                f"run directory {store.path}"
            )
            state = SweepState()
            stop_progress = asyncio.Event()
            progress = (
                asyncio.create_task(show_progress(console, state.live, load.levels, anchor.perf_ns, stop_progress))
                if show
                else None
            )
            collector = await _start_telemetry(plan, store, anchor, console) if plan.telemetry else None
            try:
                await run_sweep(
                    store=store,
                    settings=load,
                    send=_sender(client),
                    prompts=prompts,
                    drain_timeout_s=plan.client.total_timeout_s + 5.0,
                    slo=plan.slo,
                    state=state,
                    start_index=start,
                    anchor=anchor,
                )
            finally:
                if collector is not None:
                    await collector.stop()
                stop_progress.set()
                if progress is not None:
                    with contextlib.suppress(Exception):
                        await progress
                prompts.close()
                store.close()
            if prompts.stalls:
                console.print(
                    f"[yellow]{prompts.stalls} prompt(s) were made inside the load loop (prefetch ran dry)[/]"
                )
            if state.interrupted:
                result = _finish(store, plan)
                raise Interrupted(store, result)
    result = _finish(store, plan)
    if result is None:
        raise RuntimeError(f"{store.path}: the sweep ended without a finished level")
    return store, result


async def _start_telemetry(
    plan: FindPlan, store: RunStore, anchor: SessionAnchor, console: Console
) -> TelemetryCollector:
    collector = TelemetryCollector(
        default_samplers(base_url=plan.client.base_url),
        sink=store.append_telemetry,
        interval_s=plan.telemetry_interval_s,
        anchor_ns=anchor.perf_ns,
        session=anchor.session,
    )
    statuses = await collector.start()
    # Unavailable sources are said once by their own adapter (a logged warning); list what is read.
    line = "; ".join(st.describe() for st in statuses.values() if st.available)
    console.print(f"[dim]telemetry: {line or 'no source available'}[/]")
    return collector


def _finish(store: RunStore, plan: FindPlan) -> dict[str, Any] | None:
    try:
        result = analyze_store(store, settings=plan.analysis, slo=plan.slo)
    except ValueError:
        return None  # nothing finished yet: the records are on disk, there is just no level to judge
    write_reports(store, result)
    return result
