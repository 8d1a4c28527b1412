"""The sweep: warm-up, then each level in turn, every record on disk as it completes, each finished level
summarised into ``levels.jsonl`` so that an interrupted run can be analysed as it is or resumed.

This is the one pipeline ``knee find`` runs; the CLI only builds its inputs and shows its outputs.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llm_knee.analysis.slo import Objective
from llm_knee.analysis.summary import LevelSummary, summarize_level
from llm_knee.load.driver import (
    LevelContext,
    LevelOutcome,
    Live,
    PromptFeed,
    Sender,
    run_closed_level,
    run_open_level,
)
from llm_knee.load.settings import LoadSettings
from llm_knee.records.schema import RequestRecord
from llm_knee.records.store import RunStore, SessionAnchor

WARMUP_LEVEL_INDEX = -1


@dataclass
class SweepState:
    """What the progress display and the caller can see while and after the sweep runs."""

    live: Live = field(default_factory=Live)
    summaries: list[LevelSummary] = field(default_factory=list)
    interrupted: bool = False
    current_level: float | None = None
    final_drain_s: float | None = None


def completed_level_indices(store: RunStore) -> set[int]:
    return {int(e["level_index"]) for e in store.levels() if e.get("status") == "complete"}


async def run_sweep(
    *,
    store: RunStore,
    settings: LoadSettings,
    send: Sender,
    prompts: PromptFeed,
    drain_timeout_s: float,
    slo: tuple[Objective, ...] = (),
    state: SweepState | None = None,
    on_level: Callable[[LevelSummary], None] | None = None,
    start_index: int = 0,
    anchor: SessionAnchor | None = None,
) -> SweepState:
    """Run levels ``start_index..`` of ``settings.levels``. SIGINT/SIGTERM stop the sweep cleanly: the
    level in progress is summarised from what completed and marked ``interrupted``."""
    st = state or SweepState()
    anchor = anchor or store.new_session()
    clock: Callable[[], int] = lambda: time.perf_counter_ns() - anchor.perf_ns  # noqa: E731
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread: the caller handles interruption
    try:
        # Every session warms up (a resumed run meets a restarted server's cold caches too). The warm-up's
        # median request time ramps the session's first level, which has no previous level to go by.
        warm_e2e_s: float | None = None
        if settings.warmup_requests > 0:
            warm = await _global_warmup(settings, send, prompts, store, st.live, anchor.session, clock, stop)
            e2e = sorted(r.e2e_ns / 1e9 for r in warm if r.ok and r.e2e_ns is not None)
            warm_e2e_s = e2e[(len(e2e) - 1) // 2] if e2e else None
        for idx in range(start_index, len(settings.levels)):
            if stop.is_set():
                st.interrupted = True
                break
            level = settings.levels[idx]
            st.current_level = level
            level_records: list[RequestRecord] = []

            def sink(rec: RequestRecord, _keep: list[RequestRecord] = level_records) -> None:
                store.append_record(rec)
                _keep.append(rec)

            cx = LevelContext(
                level_index=idx, session=anchor.session, settings=settings, send=send, prompts=prompts,
                sink=sink, live=st.live, stop=stop, clock=clock, drain_timeout_s=drain_timeout_s,
            )  # fmt: skip
            outcome: LevelOutcome
            if settings.mode == "closed":
                ramp = 0.0
                if settings.ramp_up:
                    last = st.summaries[-1].e2e_p50_ms / 1e3 if st.summaries and st.summaries[-1].e2e_p50_ms else None
                    ramp = min(last or warm_e2e_s or 0.0, settings.max_duration_s / 2)
                outcome = await run_closed_level(cx, int(level), ramp_s=ramp)
            else:
                outcome = await run_open_level(cx, level)
            store.sync()
            summary = summarize_level(
                level_records,
                level_index=idx,
                level=level,
                mode=settings.mode,
                window=outcome.window,
                slo=slo,
            )
            summary.steady = outcome.steady
            summary.stop_reason = outcome.stop_reason
            summary.drain_s = outcome.drain_s
            status = "interrupted" if outcome.interrupted else "complete"
            store.append_level(
                {
                    "level_index": idx,
                    "level": level,
                    "status": status,
                    "session": anchor.session,
                    "window": {"start_ns": outcome.window.start_ns, "end_ns": outcome.window.end_ns},
                    "window_rates": outcome.window_rates,
                    "summary": summary.to_dict(),
                }
            )
            if outcome.interrupted:
                st.interrupted = True
                break
            st.summaries.append(summary)
            st.final_drain_s = outcome.drain_s
            if on_level is not None:
                on_level(summary)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        store.sync()
    return st


async def _global_warmup(
    settings: LoadSettings,
    send: Sender,
    prompts: PromptFeed,
    store: RunStore,
    live: Live,
    session: int,
    clock: Callable[[], int],
    stop: asyncio.Event,
) -> list[RequestRecord]:
    """A few requests one at a time before the first level (model load, kernel compilation, caches)."""
    live.reset(WARMUP_LEVEL_INDEX, 1, clock())
    done: list[RequestRecord] = []
    for i in range(settings.warmup_requests):
        if stop.is_set():
            break
        prompt = prompts.next()
        rec = RequestRecord(
            request_id=f"s{session}-warmup-{i}",
            level_index=WARMUP_LEVEL_INDEX,
            level=1,
            session=session,
            warmup=True,
            scheduled_ns=clock(),
            prompt_tokens=prompt.prompt_tokens,
            output_tokens_requested=prompt.output_tokens,
        )
        await send(prompt, rec, live)
        store.append_record(rec)
        done.append(rec)
    return done
