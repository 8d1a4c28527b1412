"""Live progress while a sweep runs: level, phase, elapsed, requests done, current tok/s, errors."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from rich.console import Console
from rich.live import Live as RichLive
from rich.table import Table

from llm_knee.load.driver import Live

NS = 1_000_000_000


def _render(live: Live, levels: Sequence[float], anchor_ns: int) -> Table:
    t = Table.grid(padding=(0, 2))
    elapsed = max(0.0, (time.perf_counter_ns() - anchor_ns - live.level_started_ns) / NS)
    pos = f"{levels.index(live.level) + 1}/{len(levels)}" if live.level in levels else "warm-up"
    t.add_row(
        f"[bold]level[/] {live.level:g} ({pos})",
        f"[bold]{live.phase}[/] {elapsed:5.1f}s",
        f"done {live.done}",
        f"in flight {live.in_flight}",
        f"{live.rate_tok_s:,.0f} tok/s",
        f"[{'red' if live.errors else 'green'}]errors {live.errors}[/]",
        f"retries {live.retries}" if live.retries else "",
    )
    return t


async def show_progress(
    console: Console, live: Live, levels: Sequence[float], anchor_ns: int, stop: asyncio.Event
) -> None:
    """Redraw 4 times a second until ``stop`` is set. Does nothing when the console is not a terminal
    except one line per level, so that logs stay readable."""
    if not console.is_terminal:
        last = None
        while not stop.is_set():
            if live.level_index != last and live.phase == "measure":
                last = live.level_index
                console.print(f"level {live.level:g}: measuring")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        return
    with RichLive(_render(live, levels, anchor_ns), console=console, refresh_per_second=4, transient=True) as rl:
        while not stop.is_set():
            rl.update(_render(live, levels, anchor_ns))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)
