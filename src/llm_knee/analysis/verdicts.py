"""Verdicts: what the telemetry says about each level, as pure functions over samples and level windows.

Each verdict function looks at the levels in sweep order and names the first level where its
condition holds, with the evidence in words, or returns None. ``client_bound`` is the exception: it
returns every level whose numbers describe the load generator rather than the server, because those
levels must be left out of the knee. Thresholds are keyword parameters whose defaults are the
practitioners' habits of domain.md §4; they are defaults, not facts.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise

import numpy as np

from llm_knee.records.schema import RequestRecord, TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.summarize import LevelWindow, Series, group_series, histogram_mean, in_window


class Severity(StrEnum):
    INFO = "info"  # evidence for the analysis (e.g. where queueing starts)
    WARNING = "warning"  # the level's numbers are real but limited by something the user should know
    CRITICAL = "critical"  # the level's numbers do not describe the server


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    level_index: int
    level: float
    evidence: str
    severity: Severity


@dataclass(frozen=True, slots=True)
class TtftGap:
    """Our mean TTFT minus the server's for one level: network plus client overhead, made visible."""

    level_index: int
    level: float
    client_ttft_mean_s: float
    server_ttft_mean_s: float
    server_observations: float

    @property
    def gap_s(self) -> float:
        return self.client_ttft_mean_s - self.server_ttft_mean_s


def _ordered(windows: Iterable[LevelWindow]) -> list[LevelWindow]:
    return sorted(windows, key=lambda w: w.level_index)


def _by_label(samples: Iterable[TelemetrySample], name: str, label: str) -> dict[str, Series]:
    """Series of ``name`` keyed by the value of one label (e.g. the GPU index)."""
    out: dict[str, Series] = {}
    for (_, labels), series in group_series(samples, name).items():
        out.setdefault(dict(labels).get(label, ""), []).extend(series)
    for series in out.values():
        series.sort(key=lambda p: p[0])
    return out


def _held_values(series: Series, at: Sequence[int]) -> list[float | None]:
    """For each time in ``at`` (ascending), the latest value of ``series`` at or before it (sample-and-hold)."""
    out: list[float | None] = []
    i, current = 0, None
    for t in at:
        while i < len(series) and series[i][0] <= t:
            current = series[i][1]
            i += 1
        out.append(current)
    return out


def _held_runs(points: Series, flags: Sequence[bool], t_end_ns: int) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive flagged readings, each reading holding until the next.

    The last reading of the window holds for one typical sampling interval, but not past ``t_end_ns``.
    """
    times = [t for t, _ in points]
    step = int(statistics.median(b - a for a, b in pairwise(times))) if len(times) > 1 else 0
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, flagged in enumerate(flags):
        if flagged and start is None:
            start = times[i]
        if not flagged and start is not None:
            runs.append((start, times[i]))
            start = None
    if start is not None:
        runs.append((start, min(t_end_ns, times[-1] + step)))
    return runs


def power_wall(
    samples: Iterable[TelemetrySample],
    windows: Iterable[LevelWindow],
    *,
    power_fraction: float = 0.95,
    min_duration_s: float = 30.0,
    clock_drop_fraction: float = 0.10,
) -> Verdict | None:
    """First level where a GPU hits its power wall.

    Fires when, within one level, a GPU's power stays ≥ ``power_fraction`` of its enforced limit for
    ≥ ``min_duration_s`` while its median SM clock over that stretch is ≥ ``clock_drop_fraction`` under
    the highest SM clock it showed in the level; or when NVML reports a power-cap throttle reason
    (SW power cap, HW power brake) held for ≥ ``min_duration_s``. A clock drop at moderate power
    (thermal, idle, application clocks) is not a power wall.
    """
    samples = list(samples)
    power = _by_label(samples, names.GPU_POWER_W, "gpu")
    limit = _by_label(samples, names.GPU_POWER_LIMIT_W, "gpu")
    clock = _by_label(samples, names.GPU_SM_CLOCK_MHZ, "gpu")
    caps = {r: _by_label(samples, names.GPU_THROTTLE_PREFIX + r, "gpu") for r in names.POWER_THROTTLE_REASONS}
    min_ns = min_duration_s * 1e9
    for w in _ordered(windows):
        for gpu in sorted(set(power) | {g for by_gpu in caps.values() for g in by_gpu}):
            found = _power_run(
                w,
                gpu,
                power.get(gpu, []),
                limit.get(gpu, []),
                clock.get(gpu, []),
                power_fraction,
                min_ns,
                clock_drop_fraction,
            )
            if found is None:
                found = _cap_reason_run(w, gpu, caps, min_ns)
            if found is not None:
                return Verdict("power_wall", w.level_index, w.level, found, Severity.WARNING)
    return None


def _power_run(
    w: LevelWindow,
    gpu: str,
    power: Series,
    limit: Series,
    clock: Series,
    power_fraction: float,
    min_ns: float,
    clock_drop_fraction: float,
) -> str | None:
    p = in_window(power, w.t0_ns, w.t1_ns)
    c = in_window(clock, w.t0_ns, w.t1_ns)
    if not p or not c or not limit:
        return None
    limits = _held_values(limit, [t for t, _ in p])
    flags = [lim is not None and v >= power_fraction * lim for (_, v), lim in zip(p, limits, strict=True)]
    level_max_clock = max(v for _, v in c)
    for start, end in _held_runs(p, flags, w.t1_ns):
        if end - start < min_ns:
            continue
        run_clock = [v for t, v in c if start <= t < end]
        if not run_clock:
            continue
        median_clock = statistics.median(run_clock)
        if median_clock <= (1.0 - clock_drop_fraction) * level_max_clock:
            run_power = [v for t, v in p if start <= t < end]
            lim = next(x for (t, _), x in zip(p, limits, strict=True) if t == start)
            return (
                f"GPU {gpu}: power {min(run_power):.0f}–{max(run_power):.0f} W, ≥ {power_fraction:.0%} of its "
                f"{lim or 0:.0f} W limit for {(end - start) / 1e9:.0f} s; median SM clock {median_clock:.0f} MHz, "
                f"{1 - median_clock / level_max_clock:.0%} under the level's max {level_max_clock:.0f} MHz"
            )
    return None


def _cap_reason_run(w: LevelWindow, gpu: str, caps: Mapping[str, Mapping[str, Series]], min_ns: float) -> str | None:
    for reason, by_gpu in caps.items():
        points = in_window(by_gpu.get(gpu, []), w.t0_ns, w.t1_ns)
        if not points:
            continue
        for start, end in _held_runs(points, [v > 0 for _, v in points], w.t1_ns):
            if end - start >= min_ns:
                return f"GPU {gpu}: NVML throttle reason {reason} held for {(end - start) / 1e9:.0f} s"
    return None


def memory_pressure(
    samples: Iterable[TelemetrySample], windows: Iterable[LevelWindow], *, peak_fraction: float = 0.90
) -> Verdict | None:
    """First level where a GPU's memory use peaks above ``peak_fraction`` of its total.

    Engines that reserve memory up front (vLLM's ``gpu_memory_utilization`` 0.9) sit near this line
    from the start; the verdict then says the KV cache has no room left to grow, not that the level
    caused it.
    """
    frac = _by_label(samples, names.GPU_MEMORY_USED_FRAC, "gpu")
    for w in _ordered(windows):
        for gpu in sorted(frac):
            inside = in_window(frac[gpu], w.t0_ns, w.t1_ns)
            if inside:
                peak = max(v for _, v in inside)
                if peak > peak_fraction:
                    return Verdict(
                        "memory",
                        w.level_index,
                        w.level,
                        f"GPU {gpu}: memory peak {peak:.1%} of total, above {peak_fraction:.0%}",
                        Severity.WARNING,
                    )
    return None


def client_bound(
    samples: Iterable[TelemetrySample],
    windows: Iterable[LevelWindow],
    *,
    cpu_pct: float = 90.0,
    loop_lag_p90_ms: float = 20.0,
) -> list[Verdict]:
    """Every level whose numbers describe the load generator, not the server.

    A level is client-bound when any load process's mean CPU over the level is ≥ ``cpu_pct`` (100 =
    one core: an event loop cannot use more) or its event-loop lag P90 is ≥ ``loop_lag_p90_ms``. Those
    levels are to be excluded from the knee, with a warning. The lag test uses P90, not P99: one stall
    (another process taking the core, a GC pause) delays a few timestamps once, while a loop that lags
    in a tenth of its probes is saturated and every timestamp it takes is late.
    """
    samples = list(samples)
    cpu = _by_label(samples, names.HOST_PROC_CPU_PCT, "pid")
    lag = _by_label(samples, names.CLIENT_LOOP_LAG_MS, "pid")
    out: list[Verdict] = []
    for w in _ordered(windows):
        evidence: list[str] = []
        for pid in sorted(cpu):
            inside = [v for _, v in in_window(cpu[pid], w.t0_ns, w.t1_ns)]
            if inside and (mean := float(np.mean(inside))) >= cpu_pct:
                evidence.append(f"load process {pid} used {mean:.0f} % of a core (≥ {cpu_pct:.0f} %)")
        for pid in sorted(lag):
            inside = [v for _, v in in_window(lag[pid], w.t0_ns, w.t1_ns)]
            if inside and (p90 := float(np.percentile(inside, 90))) >= loop_lag_p90_ms:
                evidence.append(f"event-loop lag P90 {p90:.1f} ms in process {pid} (≥ {loop_lag_p90_ms:g} ms)")
        if evidence:
            out.append(Verdict("client_bound", w.level_index, w.level, "; ".join(evidence), Severity.CRITICAL))
    return out


def client_bound_levels(
    samples: Iterable[TelemetrySample], windows: Iterable[LevelWindow], **thresholds: float
) -> frozenset[int]:
    """The level indexes :func:`client_bound` says to exclude from the knee."""
    return frozenset(v.level_index for v in client_bound(samples, windows, **thresholds))


def server_cpu_bound(
    samples: Iterable[TelemetrySample],
    windows: Iterable[LevelWindow],
    *,
    core_busy_pct: float = 95.0,
    gpu_util_pct: float = 50.0,
    exclude_levels: Collection[int] = (),
) -> Verdict | None:
    """First level where one CPU core is pegged while the GPUs stay underused (local server only).

    Per tick the busiest core is taken (the pegged thread may migrate between cores); the level fires
    when the mean of those maxima is ≥ ``core_busy_pct`` and every GPU's mean SM utilisation is below
    ``gpu_util_pct`` — the tokenizer/GIL bottleneck. Host CPU is only the server's when the server
    runs on this machine, so call it only then, and pass the client-bound levels as
    ``exclude_levels``: there the pegged core is the load generator's. Without GPU samples it cannot
    judge and returns None.
    """
    samples = list(samples)
    busy: dict[int, float] = {}
    for (_, labels), series in group_series(samples, names.HOST_CPU_BUSY_PCT).items():
        if dict(labels).get("cpu", "all") == "all":
            continue
        for t, v in series:
            busy[t] = max(busy.get(t, 0.0), v)
    busiest: Series = sorted(busy.items())
    gpu = _by_label(samples, names.GPU_SM_UTIL_PCT, "gpu")
    for w in _ordered(windows):
        if w.level_index in exclude_levels:
            continue
        top = [v for _, v in in_window(busiest, w.t0_ns, w.t1_ns)]
        utils = {g: [v for _, v in in_window(s, w.t0_ns, w.t1_ns)] for g, s in gpu.items()}
        utils = {g: u for g, u in utils.items() if u}
        if not top or not utils:
            continue
        top_mean = float(np.mean(top))
        gpu_means = {g: float(np.mean(u)) for g, u in utils.items()}
        if top_mean >= core_busy_pct and max(gpu_means.values()) < gpu_util_pct:
            gpus = ", ".join(f"GPU {g} {m:.0f} %" for g, m in sorted(gpu_means.items()))
            return Verdict(
                "server_cpu_bound",
                w.level_index,
                w.level,
                f"busiest CPU core {top_mean:.0f} % busy on average (≥ {core_busy_pct:.0f} %) while SM "
                f"utilisation stayed under {gpu_util_pct:.0f} % ({gpus})",
                Severity.WARNING,
            )
    return None


def _waiting_by_level(
    samples: Iterable[TelemetrySample], windows: Iterable[LevelWindow]
) -> list[tuple[LevelWindow, float, float]]:
    """(window, share of readings with a waiting queue, mean queue length) for levels with readings."""
    waiting: Series = sorted(
        p for series in group_series(samples, names.SERVER_REQUESTS_WAITING).values() for p in series
    )
    out = []
    for w in _ordered(windows):
        inside = [v for _, v in in_window(waiting, w.t0_ns, w.t1_ns)]
        if inside:
            out.append((w, sum(v > 0 for v in inside) / len(inside), float(np.mean(inside))))
    return out


def _queue_onset(rows: Sequence[tuple[LevelWindow, float, float]], min_share: float) -> int | None:
    """Index in ``rows`` from which the queue is persistently non-empty in every later level and grows."""
    onset = None
    for i in range(len(rows) - 1, -1, -1):
        if rows[i][1] < min_share:
            break
        onset = i
    if onset is None or rows[-1][2] < rows[onset][2]:
        return None
    return onset


def queueing(
    samples: Iterable[TelemetrySample], windows: Iterable[LevelWindow], *, min_share_waiting: float = 0.5
) -> Verdict | None:
    """First level from which the server's waiting queue is non-empty at every later level and rising.

    A level counts as queueing when at least ``min_share_waiting`` of its readings show a request
    waiting (brief blips at low load do not count); the queue must stay so through the last level,
    and its mean there must be at least its mean at the onset.
    """
    rows = _waiting_by_level(samples, windows)
    onset = _queue_onset(rows, min_share_waiting)
    if onset is None:
        return None
    trail = ", ".join(f"{r[0].level:g}: {r[2]:.1f}" for r in rows[onset:])
    return Verdict(
        "queueing",
        rows[onset][0].level_index,
        rows[onset][0].level,
        f"server waiting queue non-empty in ≥ {min_share_waiting:.0%} of readings from here on; mean waiting "
        f"by level {trail}",
        Severity.INFO,
    )


def latency_knee_from_queue(
    samples: Iterable[TelemetrySample], windows: Iterable[LevelWindow], *, min_share_waiting: float = 0.5
) -> Verdict | None:
    """Latency-knee candidate from the server queue: the last level before queueing became persistent.

    None when the server never queued persistently, or queued from the first level on (the knee then
    lies at or below the lowest level measured).
    """
    rows = _waiting_by_level(samples, windows)
    onset = _queue_onset(rows, min_share_waiting)
    if onset is None or onset == 0:
        return None
    knee, first = rows[onset - 1], rows[onset]
    return Verdict(
        "latency_knee_from_queue",
        knee[0].level_index,
        knee[0].level,
        f"waiting queue empty in {1 - knee[1]:.0%} of readings at level {knee[0].level:g}; persistent from "
        f"level {first[0].level:g} (mean {first[2]:.1f} waiting)",
        Severity.INFO,
    )


def client_ttft_means(records: Iterable[RequestRecord]) -> dict[int, float]:
    """Mean TTFT in seconds per level index over successful, non-warm-up requests."""
    by_level: dict[int, list[int]] = {}
    for r in records:
        ttft = r.ttft_ns
        if r.ok and not r.warmup and ttft is not None:
            by_level.setdefault(r.level_index, []).append(ttft)
    return {i: float(np.mean(v)) / 1e9 for i, v in by_level.items()}


def ttft_gap(
    samples: Iterable[TelemetrySample],
    windows: Iterable[LevelWindow],
    client_ttft_mean_s: Mapping[int, float],
) -> list[TtftGap]:
    """Per level, our mean TTFT minus the server's (from its TTFT histogram's sum and count deltas).

    Levels without a server TTFT histogram, or without requests of ours, are left out. The server
    counts a request in the level where its first token came; ours by the level that sent it — the
    few requests that straddle a boundary blur the two slightly.
    """
    samples = list(samples)
    sums = sorted(p for s in group_series(samples, names.SERVER_TTFT_SUM).values() for p in s)
    counts = sorted(p for s in group_series(samples, names.SERVER_TTFT_COUNT).values() for p in s)
    out = []
    for w in _ordered(windows):
        ours = client_ttft_mean_s.get(w.level_index)
        server = histogram_mean(sums, counts, w.t0_ns, w.t1_ns)
        if ours is None or server is None:
            continue
        out.append(TtftGap(w.level_index, w.level, ours, server[0], server[1]))
    return out


def all_verdicts(
    samples: Iterable[TelemetrySample], windows: Iterable[LevelWindow], *, local_server: bool = False
) -> list[Verdict]:
    """Every verdict with default thresholds, in a stable order (server CPU only for a local server)."""
    samples = list(samples)
    windows = list(windows)
    bound = client_bound(samples, windows)
    found: list[Verdict | None] = [
        power_wall(samples, windows),
        memory_pressure(samples, windows),
        *bound,
        server_cpu_bound(samples, windows, exclude_levels={v.level_index for v in bound}) if local_server else None,
        queueing(samples, windows),
        latency_knee_from_queue(samples, windows),
    ]
    return [v for v in found if v is not None]
