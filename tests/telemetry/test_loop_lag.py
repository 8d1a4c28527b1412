"""The client self-check measures how late the load process's event loop wakes up."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from llm_knee.telemetry import names
from llm_knee.telemetry.client import LoopLagSampler


async def test_a_blocked_event_loop_shows_up_as_lag(fake_clock) -> None:
    sampler = LoopLagSampler(probe_interval_s=0.01)
    assert (await sampler.open(fake_clock)).available
    await asyncio.sleep(0.15)
    fake_clock.advance(1.0)
    calm = await sampler.sample(fake_clock)
    time.sleep(0.12)  # a blocking call inside the loop: what a CPU-bound load generator does
    await asyncio.sleep(0.05)
    blocked = await sampler.sample(fake_clock)
    await sampler.close()

    assert len(calm) >= 3
    assert all(s.name == names.CLIENT_LOOP_LAG_MS and s.source == "client" for s in calm + blocked)
    assert all(s.labels == {"pid": str(os.getpid())} for s in calm + blocked)
    assert all(s.value >= 0 for s in calm + blocked)
    assert max(s.value for s in blocked) >= 100.0
    assert sorted(s.value for s in calm)[len(calm) // 2] < 50.0
    # Probes carry the time they were taken, not the time they were handed over.
    assert {s.t_ns for s in calm} == {0}
    assert {s.t_ns for s in blocked} == {fake_clock.t_ns}


async def test_probes_stop_when_closed(fake_clock) -> None:
    sampler = LoopLagSampler(probe_interval_s=0.01)
    await sampler.open(fake_clock)
    await asyncio.sleep(0.03)
    await sampler.close()
    await sampler.sample(fake_clock)
    await asyncio.sleep(0.05)
    assert await sampler.sample(fake_clock) == []


def test_probe_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="probe_interval_s must be > 0"):
        LoopLagSampler(probe_interval_s=0)
