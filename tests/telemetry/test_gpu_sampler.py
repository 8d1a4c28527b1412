"""The GPU sampler, driven through its NVML adapter.

CI has no GPU, so these tests replay NVML readings from a JSON file through ``ReplayNvmlBackend``
(tests/telemetry/data/nvml_h100_power_cap.json: a hand-written, plausible trace of two H100s under a
concurrency sweep that ends at the power cap). The sampler code path is the same one that reads the
driver; only the backend differs. The real ``PynvmlBackend`` is checked for saying clearly why it
cannot run on a machine without an NVIDIA driver (and for listing the GPUs where there is one);
benchmarks/gpu_telemetry_check.py exercises it on a real GPU.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from llm_knee.analysis.verdicts import memory_pressure, power_wall
from llm_knee.telemetry import names
from llm_knee.telemetry.gpu import (
    GpuSampler,
    PynvmlBackend,
    RecordingNvmlBackend,
    ReplayNvmlBackend,
    decode_throttle_reasons,
    write_replay,
)
from llm_knee.telemetry.summarize import LevelWindow, summarize_levels

TRACE = Path(__file__).parent / "data" / "nvml_h100_power_cap.json"
S = 1_000_000_000


async def replay_all(backend: ReplayNvmlBackend, fake_clock) -> list:
    """Every frame of a replay through the GPU sampler, stamped with the frame's own time."""
    sampler = GpuSampler(backend)
    assert (await sampler.open(fake_clock)).available
    samples = []
    for t_s in backend.frame_times_s:
        fake_clock.t_ns = int(t_s * S)
        samples += await sampler.sample(fake_clock)
    await sampler.close()
    return samples


def test_throttle_bitmask_decodes_to_reason_names() -> None:
    assert decode_throttle_reasons(0) == ()
    assert decode_throttle_reasons(0x4) == ("sw_power_cap",)
    assert decode_throttle_reasons(0x4 | 0x8 | 0x40) == ("sw_power_cap", "hw_slowdown", "hw_thermal_slowdown")
    assert decode_throttle_reasons(0x20) == ("sw_thermal_slowdown",)
    assert decode_throttle_reasons(0x1 << 20) == ()  # bits newer than this table are ignored, not misnamed


async def test_replayed_readings_become_samples_per_gpu(fake_clock) -> None:
    backend = ReplayNvmlBackend(TRACE)
    samples = await replay_all(backend, fake_clock)
    raw = json.loads(TRACE.read_text())
    assert {s.source for s in samples} == {"gpu"}
    assert {s.labels["gpu"] for s in samples} == {"0", "1"}
    power0 = [s.value for s in samples if s.name == names.GPU_POWER_W and s.labels["gpu"] == "0"]
    assert power0 == [f["gpus"][0]["power_w"] for f in raw["frames"]]
    frac = [s.value for s in samples if s.name == names.GPU_MEMORY_USED_FRAC and s.labels["gpu"] == "0"]
    assert frac[0] == pytest.approx(77634448916 / 85520809984)
    clocks_max = {s.value for s in samples if s.name == names.GPU_SM_CLOCK_MAX_MHZ}
    assert clocks_max == {1980.0}


async def test_throttle_reasons_are_recorded_as_flags_that_average_to_time_shares(fake_clock) -> None:
    samples = await replay_all(ReplayNvmlBackend(TRACE), fake_clock)
    cap = [
        (s.t_ns // S, s.value)
        for s in samples
        if s.name == names.GPU_THROTTLE_PREFIX + "sw_power_cap" and s.labels["gpu"] == "0"
    ]
    assert {t for t, v in cap if v == 1.0} == set(range(92, 130))
    idle = [s.value for s in samples if s.name == names.GPU_THROTTLE_PREFIX + "gpu_idle" and s.labels["gpu"] == "1"]
    assert sum(idle) == 10 + 2  # idle before the load and at the end of the drain


async def test_replayed_sweep_summarises_per_level_and_shows_the_power_wall(fake_clock) -> None:
    samples = await replay_all(ReplayNvmlBackend(TRACE), fake_clock)
    windows = [LevelWindow(i, level, (10 + 40 * i) * S, (50 + 40 * i) * S) for i, level in enumerate((8, 32, 128))]
    summary = summarize_levels(samples, windows)
    power = [summary[i]["gpu.power_w{gpu=0}"] for i in range(3)]
    assert power[0]["mean"] < power[1]["mean"] < power[2]["mean"]
    assert power[2]["p95"] <= power[2]["max"] <= 700.0
    assert summary[2]["gpu.throttle.sw_power_cap{gpu=0}"]["mean"] == pytest.approx(38 / 40)
    assert summary[1]["gpu.sm_clock_mhz{gpu=1}"]["mean"] > summary[2]["gpu.sm_clock_mhz{gpu=1}"]["mean"]

    wall = power_wall(samples, windows)
    assert wall is not None and wall.level_index == 2 and wall.level == 128
    assert "GPU 0" in wall.evidence and "700 W limit" in wall.evidence
    # vLLM reserves 90 % of memory plus its CUDA context before the first request: the memory verdict
    # fires from the first level on.
    mem = memory_pressure(samples, windows)
    assert mem is not None and mem.level_index == 0


async def test_the_end_of_a_replay_is_reported_as_the_gpu_going_away(fake_clock, caplog) -> None:
    backend = ReplayNvmlBackend(TRACE)
    await replay_all(backend, fake_clock)
    sampler = GpuSampler(backend)
    await sampler.open(fake_clock)
    for _ in backend.frame_times_s:
        await sampler.sample(fake_clock)
    with caplog.at_level(logging.WARNING, logger="llm_knee.telemetry"):
        assert await sampler.sample(fake_clock) == []
        assert await sampler.sample(fake_clock) == []
    assert not sampler.status().available
    assert "ended after 140 frames" in (sampler.unavailable_reason or "")
    assert len(caplog.records) == 1


async def test_readings_written_as_a_replay_play_back_identically(tmp_path, fake_clock) -> None:
    source = ReplayNvmlBackend(TRACE)
    devices = source.open()
    frames = [(t, source.read()) for t in source.frame_times_s[:5]]
    out = tmp_path / "copy.json"
    write_replay(out, devices, frames, note="copied")
    copy = ReplayNvmlBackend(out)
    assert copy.open() == devices
    assert [copy.read() for _ in range(5)] == [readings for _, readings in frames]
    assert copy.note == "copied"


async def test_a_recording_backend_saves_what_the_sampler_read(tmp_path, fake_clock) -> None:
    ticks = iter(range(100, 200))
    recorder = RecordingNvmlBackend(ReplayNvmlBackend(TRACE), clock=lambda: float(next(ticks)))
    sampler = GpuSampler(recorder)
    await sampler.open(fake_clock)
    for _ in range(3):
        await sampler.sample(fake_clock)
    await sampler.close()
    out = tmp_path / "recorded.json"
    recorder.write(out, note="three frames")
    again = ReplayNvmlBackend(out)
    assert again.frame_times_s == [0.0, 1.0, 2.0]
    original = ReplayNvmlBackend(TRACE)
    original.open()
    again.open()
    assert [again.read() for _ in range(3)] == [original.read() for _ in range(3)]


def test_a_broken_replay_file_is_refused_with_its_path(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    doc = json.loads(TRACE.read_text())
    doc["frames"][3]["gpus"][0]["sm_util_pct"] = 140
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"bad\.json: not a valid NVML replay file"):
        ReplayNvmlBackend(bad)
    doc = json.loads(TRACE.read_text())
    doc["frames"][7]["gpus"][1]["index"] = 5
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"frame 7 reads GPU \[5\] not listed"):
        ReplayNvmlBackend(bad)


async def test_the_real_nvml_backend_says_clearly_whether_it_can_read_a_gpu(fake_clock, caplog) -> None:
    sampler = GpuSampler(PynvmlBackend())
    with caplog.at_level(logging.WARNING, logger="llm_knee.telemetry"):
        status = await sampler.open(fake_clock)
        samples = await sampler.sample(fake_clock)
    await sampler.close()
    if status.available:  # a machine with an NVIDIA driver
        assert sampler.devices and {s.name for s in samples} >= {names.GPU_POWER_W, names.GPU_MEMORY_USED_FRAC}
    else:
        assert samples == []
        assert "NVML" in status.reason or "nvidia-ml-py" in status.reason
        assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
