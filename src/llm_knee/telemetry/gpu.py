"""GPU telemetry through NVML (nvidia-ml-py), behind one adapter so it can be replayed without a GPU.

All NVML access goes through an :class:`NvmlBackend`: :class:`PynvmlBackend` talks to the driver,
:class:`ReplayNvmlBackend` plays back readings recorded in a JSON file (``write_replay`` writes that
file from any backend, e.g. on a machine with a GPU). :class:`GpuSampler` turns readings into
``TelemetrySample``\\ s and never touches ``pynvml`` itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.source import Clock, SourceStatus, StatusReporter

logger = logging.getLogger(__name__)

# NVML's clocks-event ("throttle") reason bits, from nvml.h. They are part of the driver ABI and fixed,
# so decoding needs no driver.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
POWER_THROTTLE_REASONS = names.POWER_THROTTLE_REASONS
THERMAL_THROTTLE_REASONS = names.THERMAL_THROTTLE_REASONS


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the reasons set in an NVML clocks-event bitmask (unknown bits are ignored)."""
    return tuple(name for bit, name in THROTTLE_REASONS if mask & bit)


class NvmlUnavailable(Exception):
    """NVML cannot be read; the message says why in words a user can act on."""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """What does not change while a GPU is sampled."""

    index: int
    name: str
    memory_total_bytes: int
    sm_clock_max_mhz: float | None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant. ``None`` where the GPU does not support the query."""

    index: int
    memory_used_bytes: int | None
    sm_util_pct: float | None
    mem_util_pct: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: float | None
    temperature_c: float | None
    throttle_reasons: int | None


class NvmlBackend(Protocol):
    """The only door to NVML. ``open``/``read`` raise :class:`NvmlUnavailable` with a reason."""

    def open(self) -> list[GpuDevice]: ...

    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


class PynvmlBackend:
    """Reads the real driver through ``pynvml`` (imported here, lazily, so no GPU is needed to import)."""

    def __init__(self, gpus: Sequence[int] | None = None) -> None:
        self._wanted = None if gpus is None else list(gpus)
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []

    def open(self) -> list[GpuDevice]:
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML could not start ({exc}); no NVIDIA driver on this machine?") from None
        self._nvml = pynvml
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            indices = list(range(count)) if self._wanted is None else self._wanted
            missing = [i for i in indices if not 0 <= i < count]
            if count == 0 or missing:
                self.close()
                raise NvmlUnavailable(
                    "NVML sees no GPU" if count == 0 else f"GPU index {missing} not present ({count} GPUs seen)"
                )
            devices = []
            for i in indices:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                self._handles.append((i, handle))
                raw_name = pynvml.nvmlDeviceGetName(handle)
                name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
                total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
                max_clock = self._query(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
                devices.append(GpuDevice(i, name, total, None if max_clock is None else float(max_clock)))
            return devices
        except pynvml.NVMLError as exc:
            self.close()
            raise NvmlUnavailable(f"NVML query failed while listing GPUs: {exc}") from None

    def _query(self, fn: Callable[..., Any], *args: Any) -> Any:
        # Consumer and older boards answer NOT_SUPPORTED to some queries; that is a gap, not a failure.
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def read(self) -> list[GpuReading]:
        nv = self._nvml
        if nv is None:
            raise NvmlUnavailable("NVML backend read before open()")
        # Renamed "clocks event reasons" in recent drivers; the old name remains for older bindings.
        event_reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if event_reasons is None:
            event_reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons
        readings = []
        for index, h in self._handles:
            mem = self._query(nv.nvmlDeviceGetMemoryInfo, h)
            util = self._query(nv.nvmlDeviceGetUtilizationRates, h)
            power_mw = self._query(nv.nvmlDeviceGetPowerUsage, h)
            limit_mw = self._query(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            clock = self._query(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            temp = self._query(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            reasons = self._query(event_reasons, h)
            readings.append(
                GpuReading(
                    index=index,
                    memory_used_bytes=None if mem is None else int(mem.used),
                    sm_util_pct=None if util is None else float(util.gpu),
                    mem_util_pct=None if util is None else float(util.memory),
                    power_w=None if power_mw is None else float(power_mw) / 1000.0,
                    power_limit_w=None if limit_mw is None else float(limit_mw) / 1000.0,
                    sm_clock_mhz=None if clock is None else float(clock),
                    temperature_c=None if temp is None else float(temp),
                    throttle_reasons=None if reasons is None else int(reasons),
                )
            )
        return readings

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                logger.debug("nvmlShutdown failed: %s", exc)
        self._nvml = None
        self._handles = []


# --- the replay file: readings recorded from a real backend, or written by hand for tests ---

REPLAY_FORMAT = "llm-knee-nvml-replay/1"


class _ReplayDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0)
    name: str
    memory_total_bytes: int = Field(gt=0)
    sm_clock_max_mhz: float | None = None


class _ReplayReading(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0)
    memory_used_bytes: int | None = Field(default=None, ge=0)
    sm_util_pct: float | None = Field(default=None, ge=0, le=100)
    mem_util_pct: float | None = Field(default=None, ge=0, le=100)
    power_w: float | None = Field(default=None, ge=0)
    power_limit_w: float | None = Field(default=None, gt=0)
    sm_clock_mhz: float | None = Field(default=None, ge=0)
    temperature_c: float | None = None
    throttle_reasons: int | None = Field(default=None, ge=0)


class _ReplayFrame(BaseModel):
    model_config = ConfigDict(extra="forbid")
    t_s: float  # seconds since the recording started; kept so a replay can be laid on a clock
    gpus: list[_ReplayReading]


class _ReplayFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["llm-knee-nvml-replay/1"]
    note: str = ""
    devices: list[_ReplayDevice] = Field(min_length=1)
    frames: list[_ReplayFrame] = Field(min_length=1)


class ReplayNvmlBackend:
    """Plays back recorded NVML readings, one frame per ``read()``; for tests and demos without a GPU.

    When the frames run out, ``read`` raises :class:`NvmlUnavailable`, just as a GPU that fell off
    the bus would.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        try:
            raw = json.loads(self._path.read_text())
            self._file = _ReplayFile.model_validate(raw)
        except (OSError, json.JSONDecodeError, ValidationError) as exc:
            raise ValueError(f"{self._path}: not a valid NVML replay file ({REPLAY_FORMAT}): {exc}") from exc
        known = {d.index for d in self._file.devices}
        for n, frame in enumerate(self._file.frames):
            unknown = {r.index for r in frame.gpus} - known
            if unknown:
                raise ValueError(f"{self._path}: frame {n} reads GPU {sorted(unknown)} not listed in devices")
        self._next = 0

    @property
    def frame_times_s(self) -> list[float]:
        return [f.t_s for f in self._file.frames]

    @property
    def note(self) -> str:
        return self._file.note

    def open(self) -> list[GpuDevice]:
        self._next = 0
        return [GpuDevice(d.index, d.name, d.memory_total_bytes, d.sm_clock_max_mhz) for d in self._file.devices]

    def read(self) -> list[GpuReading]:
        if self._next >= len(self._file.frames):
            raise NvmlUnavailable(f"replay {self._path.name} ended after {len(self._file.frames)} frames")
        frame = self._file.frames[self._next]
        self._next += 1
        return [GpuReading(**r.model_dump()) for r in frame.gpus]

    def close(self) -> None:
        self._next = len(self._file.frames)


def replay_document(
    devices: Sequence[GpuDevice], frames: Sequence[tuple[float, Sequence[GpuReading]]], note: str = ""
) -> dict[str, Any]:
    """A replay file's content from readings taken at ``t_s`` seconds (validated before it is returned)."""
    doc = {
        "format": REPLAY_FORMAT,
        "note": note,
        "devices": [
            {
                "index": d.index,
                "name": d.name,
                "memory_total_bytes": d.memory_total_bytes,
                "sm_clock_max_mhz": d.sm_clock_max_mhz,
            }
            for d in devices
        ],
        "frames": [{"t_s": t_s, "gpus": [_reading_dict(r) for r in readings]} for t_s, readings in frames],
    }
    _ReplayFile.model_validate(doc)
    return doc


def _reading_dict(r: GpuReading) -> dict[str, Any]:
    return {
        "index": r.index,
        "memory_used_bytes": r.memory_used_bytes,
        "sm_util_pct": r.sm_util_pct,
        "mem_util_pct": r.mem_util_pct,
        "power_w": r.power_w,
        "power_limit_w": r.power_limit_w,
        "sm_clock_mhz": r.sm_clock_mhz,
        "temperature_c": r.temperature_c,
        "throttle_reasons": r.throttle_reasons,
    }


def write_replay(
    path: str | os.PathLike[str],
    devices: Sequence[GpuDevice],
    frames: Sequence[tuple[float, Sequence[GpuReading]]],
    note: str = "",
) -> None:
    """Write readings as a replay file that :class:`ReplayNvmlBackend` can play back."""
    Path(path).write_text(json.dumps(replay_document(devices, frames, note), indent=1) + "\n")


class RecordingNvmlBackend:
    """Passes another backend through and keeps every reading, to be saved with :meth:`write`.

    Run on a machine with a GPU, it turns a real session into a replay file for tests.
    """

    def __init__(self, inner: NvmlBackend, clock: Callable[[], float]) -> None:
        self._inner = inner
        self._clock = clock  # seconds, any origin: frames are stored relative to the first one
        self._devices: list[GpuDevice] = []
        self._frames: list[tuple[float, list[GpuReading]]] = []

    @property
    def frames(self) -> list[tuple[float, list[GpuReading]]]:
        t0 = self._frames[0][0] if self._frames else 0.0
        return [(round(t - t0, 3), readings) for t, readings in self._frames]

    def open(self) -> list[GpuDevice]:
        self._devices = self._inner.open()
        return self._devices

    def read(self) -> list[GpuReading]:
        t = self._clock()
        readings = self._inner.read()
        self._frames.append((t, readings))
        return readings

    def close(self) -> None:
        self._inner.close()

    def write(self, path: str | os.PathLike[str], note: str = "") -> None:
        if not self._frames:
            raise ValueError("nothing recorded: no NVML reading was taken")
        write_replay(path, self._devices, self.frames, note)


def reading_samples(t_ns: int, device: GpuDevice, r: GpuReading) -> list[TelemetrySample]:
    """Normalised samples for one reading of one GPU."""
    labels = {"gpu": str(r.index)}
    values: list[tuple[str, float | None]] = [
        (names.GPU_MEMORY_USED_BYTES, r.memory_used_bytes),
        (names.GPU_MEMORY_TOTAL_BYTES, device.memory_total_bytes),
        (
            names.GPU_MEMORY_USED_FRAC,
            None if r.memory_used_bytes is None else r.memory_used_bytes / device.memory_total_bytes,
        ),
        (names.GPU_SM_UTIL_PCT, r.sm_util_pct),
        (names.GPU_MEM_UTIL_PCT, r.mem_util_pct),
        (names.GPU_POWER_W, r.power_w),
        (names.GPU_POWER_LIMIT_W, r.power_limit_w),
        (names.GPU_SM_CLOCK_MHZ, r.sm_clock_mhz),
        (names.GPU_SM_CLOCK_MAX_MHZ, device.sm_clock_max_mhz),
        (names.GPU_TEMPERATURE_C, r.temperature_c),
    ]
    if r.throttle_reasons is not None:
        values.append((names.GPU_THROTTLE_MASK, r.throttle_reasons))
        # Every reason as 0/1 at every tick, so a level's mean is the share of time it was active.
        values.extend(
            (names.GPU_THROTTLE_PREFIX + n, float(bool(r.throttle_reasons & bit))) for bit, n in THROTTLE_REASONS
        )
    return [TelemetrySample(t_ns, "gpu", name, float(v), dict(labels)) for name, v in values if v is not None]


class GpuSampler:
    """Samples every GPU the backend exposes; NVML calls run in a worker thread, off the event loop."""

    source = "gpu"

    def __init__(self, backend: NvmlBackend | None = None) -> None:
        self._backend: NvmlBackend = backend if backend is not None else PynvmlBackend()
        self._devices: dict[int, GpuDevice] = {}
        self._status = StatusReporter(self.source, logger)
        self._open = False

    @property
    def devices(self) -> list[GpuDevice]:
        return list(self._devices.values())

    @property
    def unavailable_reason(self) -> str | None:
        return self._status.unavailable_reason

    def status(self) -> SourceStatus:
        return self._status.status

    async def open(self, clock: Clock) -> SourceStatus:
        try:
            devices = await asyncio.to_thread(self._backend.open)
        except NvmlUnavailable as exc:
            return self._status.unavailable(str(exc))
        self._devices = {d.index: d for d in devices}
        self._open = True
        return self._status.available(", ".join(f"{d.index}: {d.name}" for d in devices))

    async def sample(self, clock: Clock) -> list[TelemetrySample]:
        if not self._open:
            return []
        try:
            t_ns, readings = await asyncio.to_thread(self._read, clock)
        except NvmlUnavailable as exc:
            self._open = False  # a lost GPU does not come back within a run
            self._status.unavailable(str(exc))
            return []
        out: list[TelemetrySample] = []
        for r in readings:
            device = self._devices.get(r.index)
            if device is None:
                raise RuntimeError(f"NVML backend returned a reading for GPU {r.index}, which it did not list")
            out.extend(reading_samples(t_ns, device, r))
        return out

    def _read(self, clock: Clock) -> tuple[int, list[GpuReading]]:
        t_ns = clock()
        return t_ns, self._backend.read()

    async def close(self) -> None:
        if self._open:
            await asyncio.to_thread(self._backend.close)
        self._open = False
