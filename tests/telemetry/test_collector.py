"""The collector runs every sampler beside the load, on the records' clock, and survives bad sources."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.client import LoopLagSampler
from llm_knee.telemetry.gpu import GpuSampler, ReplayNvmlBackend
from llm_knee.telemetry.host import HostSampler
from llm_knee.telemetry.sampler import TelemetryCollector, default_samplers, target_of
from llm_knee.telemetry.server import ServerMetricsSampler
from llm_knee.telemetry.source import Clock, SourceStatus

TRACE = Path(__file__).parent / "data" / "nvml_h100_power_cap.json"


async def test_all_sources_are_sampled_onto_one_clock_and_sink(metrics_server) -> None:
    port = metrics_server("vllm")
    anchor = time.perf_counter_ns()
    got: list[TelemetrySample] = []
    collector = TelemetryCollector(
        [
            GpuSampler(ReplayNvmlBackend(TRACE)),
            HostSampler(("127.0.0.1", port)),
            ServerMetricsSampler(f"http://127.0.0.1:{port}/v1"),
            LoopLagSampler(probe_interval_s=0.02),
        ],
        got.append,
        interval_s=0.1,
        anchor_ns=anchor,
        session=3,
    )
    statuses = await collector.start()
    assert {k: v.available for k, v in statuses.items()} == {"gpu": True, "host": True, "server": True, "client": True}
    await asyncio.sleep(0.55)
    await collector.stop()
    end = time.perf_counter_ns() - anchor

    assert {s.source for s in got} == {"gpu", "host", "server", "client"}
    assert all(s.session == 3 for s in got)
    assert all(0 <= s.t_ns <= end for s in got)
    gpu_ticks = {s.t_ns for s in got if s.name == names.GPU_POWER_W}
    assert 4 <= len(gpu_ticks) <= 8  # ~0.55 s at 10 Hz, plus the final reading taken at stop
    assert collector.available_sources == ["gpu", "host", "server", "client"]


class _Exploding:
    """A source whose reads fail with an unexpected error."""

    source = "engine"

    def __init__(self) -> None:
        self.calls = 0

    def status(self) -> SourceStatus:
        return SourceStatus(self.source, available=True)

    async def open(self, clock: Clock) -> SourceStatus:
        return self.status()

    async def sample(self, clock: Clock) -> list[TelemetrySample]:
        self.calls += 1
        raise OSError("device vanished")

    async def close(self) -> None:
        return None


async def test_a_failing_sampler_is_logged_once_and_does_not_stop_the_others(caplog) -> None:
    got: list[TelemetrySample] = []
    bad = _Exploding()
    collector = TelemetryCollector([bad, LoopLagSampler(probe_interval_s=0.01)], got.append, interval_s=0.05)
    with caplog.at_level(logging.WARNING, logger="llm_knee.telemetry"):
        await collector.start()
        await asyncio.sleep(0.3)
        await collector.stop()
    assert bad.calls >= 3
    failures = [r for r in caplog.records if "sampling failed" in r.getMessage()]
    assert len(failures) == 1 and "device vanished" in failures[0].getMessage()
    assert failures[0].exc_info is None
    assert any(s.source == "client" for s in got)


class _BrokenOnOpen(_Exploding):
    source = "broken"

    async def open(self, clock: Clock) -> SourceStatus:
        raise RuntimeError("driver mismatch")


async def test_a_sampler_that_cannot_even_open_is_reported_and_left_out(caplog) -> None:
    got: list[TelemetrySample] = []
    broken = _BrokenOnOpen()
    collector = TelemetryCollector([broken, LoopLagSampler(probe_interval_s=0.01)], got.append, interval_s=0.05)
    with caplog.at_level(logging.WARNING, logger="llm_knee.telemetry"):
        statuses = await collector.start()
        await asyncio.sleep(0.15)
        await collector.stop()
    assert not statuses["broken"].available
    assert statuses["broken"].reason == "failed to open: RuntimeError: driver mismatch"
    assert collector.available_sources == ["client"]
    assert broken.calls == 0
    assert [r.exc_info for r in caplog.records] == [None]


async def test_a_sink_error_stops_collection_and_is_raised_from_stop() -> None:
    def full_disk(sample: TelemetrySample) -> None:
        raise OSError(28, "No space left on device")

    collector = TelemetryCollector([LoopLagSampler(probe_interval_s=0.01)], full_disk, interval_s=0.05)
    await collector.start()
    await asyncio.sleep(0.2)
    with pytest.raises(OSError, match="No space left"):
        await collector.stop()


async def test_collector_is_an_async_context_manager_and_reports_absent_sources(tmp_path) -> None:
    got: list[TelemetrySample] = []
    async with TelemetryCollector(
        [HostSampler(proc_root=tmp_path), LoopLagSampler(0.01)], got.append, interval_s=0.05
    ) as collector:
        await asyncio.sleep(0.12)
        statuses = collector.statuses()
    assert not statuses["host"].available and "/proc" in statuses["host"].reason
    assert collector.available_sources == ["client"]
    assert {s.source for s in got} == {"client"}


def test_two_samplers_for_one_source_are_refused() -> None:
    with pytest.raises(ValueError, match="more than one sampler for source"):
        TelemetryCollector([LoopLagSampler(), LoopLagSampler()], lambda s: None)


def test_default_samplers_follow_the_url_and_switches() -> None:
    kinds = [s.source for s in default_samplers(base_url="http://127.0.0.1:8000/v1")]
    assert kinds == ["gpu", "host", "server", "client"]
    assert [s.source for s in default_samplers(gpu=False, client=False)] == ["host"]
    assert target_of("http://localhost:8000/v1") == ("localhost", 8000)
    assert target_of("https://api.example/v1") == ("api.example", 443)
    with pytest.raises(ValueError, match="has no host"):
        target_of("/v1")
