"""Host telemetry from Linux /proc: CPU per core, the load generator's own CPU, TCP to the target.

Everything here is a delta between two readings, so the first ``sample`` after ``open`` already
describes the interval since ``open``. Parsing is split into pure functions over the files' text so
it can be checked against fixed inputs as well as the live machine.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from llm_knee.records.schema import TelemetrySample
from llm_knee.telemetry import names
from llm_knee.telemetry.source import Clock, SourceStatus, StatusReporter

logger = logging.getLogger(__name__)

TCP_ESTABLISHED = "01"  # the st column of /proc/net/tcp


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """One /proc/stat ``cpu`` line, in clock ticks (guest time is already inside user and nice)."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        return self.user + self.nice + self.system + self.idle + self.iowait + self.irq + self.softirq + self.steal


def parse_proc_stat(text: str) -> dict[str, CpuTimes]:
    """CPU times per core from /proc/stat, keyed "all" for the summary line and "0", "1", ... per core."""
    out: dict[str, CpuTimes] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        fields = line.split()
        key = fields[0][3:] or "all"
        v = [int(x) for x in fields[1:9]] + [0] * max(0, 8 - len(fields[1:9]))
        out[key] = CpuTimes(*v)
    if not out:
        raise ValueError("no cpu lines in /proc/stat text")
    return out


def cpu_percentages(before: CpuTimes, after: CpuTimes) -> tuple[float, float, float] | None:
    """(user %, system %, busy %) over the interval; None when no tick elapsed."""
    total = after.total - before.total
    if total <= 0:
        return None
    user = (after.user - before.user) + (after.nice - before.nice)
    system = (after.system - before.system) + (after.irq - before.irq) + (after.softirq - before.softirq)
    idle = (after.idle - before.idle) + (after.iowait - before.iowait)
    return 100.0 * user / total, 100.0 * system / total, 100.0 * (total - idle) / total


def parse_pid_cpu_ticks(text: str) -> int:
    """utime + stime (clock ticks) from a /proc/<pid>/stat line."""
    # The command name is in parentheses and may itself hold spaces or parentheses.
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])


def _decode_address(hex_addr: str) -> str:
    # /proc/net/tcp prints addresses as 32-bit words in host byte order.
    if len(hex_addr) == 8:
        return socket.inet_ntop(socket.AF_INET, struct.pack("=I", int(hex_addr, 16)))
    words = [int(hex_addr[i : i + 8], 16) for i in range(0, 32, 8)]
    return _plain(str(ipaddress.IPv6Address(struct.pack("=4I", *words))))


def count_established(text: str, port: int, addresses: frozenset[str] | None = None) -> int:
    """Established connections in a /proc/net/tcp or tcp6 text whose remote end is ``port``.

    ``addresses`` (IPv4-mapped IPv6 written as plain IPv4) narrows the match to those remote hosts.
    """
    n = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != TCP_ESTABLISHED:
            continue
        rem_addr, rem_port = fields[2].split(":")
        if int(rem_port, 16) != port:
            continue
        if addresses is None or _decode_address(rem_addr) in addresses:
            n += 1
    return n


def parse_tcp_snmp(text: str) -> dict[str, int]:
    """The ``Tcp:`` counters of /proc/net/snmp (header line, then values line)."""
    rows = [line.split() for line in text.splitlines() if line.startswith("Tcp:")]
    if len(rows) < 2:
        raise ValueError("no Tcp: lines in /proc/net/snmp text")
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:], strict=True)}


@dataclass(frozen=True, slots=True)
class _Snapshot:
    t_ns: int  # on the session clock
    mono_ns: int  # perf_counter_ns, for rates
    cpus: dict[str, CpuTimes]
    proc_ticks: dict[int, int]
    tcp: dict[str, int] | None
    established: int | None


class HostSampler:
    """CPU user/system per core, the load processes' CPU, TCP connections to the target, retransmits.

    ``pids`` returns the load generator's processes at each tick (default: this process), so worker
    processes started later are picked up. ``target`` is the server's (host, port); without it no
    connection count is taken. Retransmits are machine-wide: /proc/net/snmp has no per-peer counter.
    """

    source = "host"

    def __init__(
        self,
        target: tuple[str, int] | None = None,
        *,
        pids: Callable[[], Iterable[int]] | None = None,
        proc_root: str | os.PathLike[str] = "/proc",
    ) -> None:
        self._target = target
        self._pids = pids if pids is not None else (lambda: (os.getpid(),))
        self._proc = Path(proc_root)
        self._addresses: frozenset[str] | None = None
        self._ticks_per_s = os.sysconf("SC_CLK_TCK")
        self._last: _Snapshot | None = None
        self._status = StatusReporter(self.source, logger)
        self._missing: set[str] = set()

    @property
    def unavailable_reason(self) -> str | None:
        return self._status.unavailable_reason

    def status(self) -> SourceStatus:
        return self._status.status

    async def open(self, clock: Clock) -> SourceStatus:
        if not (self._proc / "stat").is_file():
            return self._status.unavailable(f"{self._proc}/stat not found: host telemetry needs Linux /proc")
        if self._target is not None:
            self._addresses = await asyncio.to_thread(_resolve, self._target[0])
        self._last = await asyncio.to_thread(self._snapshot, clock)
        parts = ["cpu per core", "process cpu"]
        if self._last.established is not None:
            parts.append(f"tcp to {self._target_label()}")
        if self._last.tcp is not None:
            parts.append("retransmits")
        return self._status.available(", ".join(parts))

    def _target_label(self) -> str:
        assert self._target is not None
        return f"{self._target[0]}:{self._target[1]}"

    def _read_optional(self, relative: str) -> str | None:
        # A missing file (a container without /proc/net) loses that one metric, said once.
        try:
            return (self._proc / relative).read_text()
        except OSError as exc:
            if relative not in self._missing:
                self._missing.add(relative)
                logger.warning(
                    "telemetry host: cannot read %s/%s (%s); skipping it", self._proc, relative, exc.strerror
                )
            return None

    def _snapshot(self, clock: Clock) -> _Snapshot:
        stat = (self._proc / "stat").read_text()
        t_ns, mono_ns = clock(), time.perf_counter_ns()
        proc_ticks: dict[int, int] = {}
        for pid in self._pids():
            try:
                proc_ticks[pid] = parse_pid_cpu_ticks((self._proc / str(pid) / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue  # the process ended between listing and reading
        snmp = self._read_optional("net/snmp")
        established = None
        if self._target is not None:
            texts = [self._read_optional("net/tcp"), self._read_optional("net/tcp6")]
            present = [t for t in texts if t is not None]
            if present:
                established = sum(count_established(t, self._target[1], self._addresses) for t in present)
        return _Snapshot(
            t_ns=t_ns,
            mono_ns=mono_ns,
            cpus=parse_proc_stat(stat),
            proc_ticks=proc_ticks,
            tcp=None if snmp is None else parse_tcp_snmp(snmp),
            established=established,
        )

    async def sample(self, clock: Clock) -> list[TelemetrySample]:
        if self._last is None:
            return []
        now = await asyncio.to_thread(self._snapshot, clock)
        before, self._last = self._last, now
        return self._diff(before, now)

    def _diff(self, before: _Snapshot, now: _Snapshot) -> list[TelemetrySample]:
        t = now.t_ns
        out: list[TelemetrySample] = []
        for cpu, times in now.cpus.items():
            prev = before.cpus.get(cpu)
            pct = None if prev is None else cpu_percentages(prev, times)
            if pct is None:
                continue
            labels = {"cpu": cpu}
            out.append(TelemetrySample(t, self.source, names.HOST_CPU_USER_PCT, pct[0], dict(labels)))
            out.append(TelemetrySample(t, self.source, names.HOST_CPU_SYSTEM_PCT, pct[1], dict(labels)))
            out.append(TelemetrySample(t, self.source, names.HOST_CPU_BUSY_PCT, pct[2], dict(labels)))
        elapsed_s = (now.mono_ns - before.mono_ns) / 1e9
        main_pid = os.getpid()
        if elapsed_s > 0:
            for pid, ticks in now.proc_ticks.items():
                if pid not in before.proc_ticks:
                    continue  # new worker: its CPU is counted from the next tick on
                used = 100.0 * (ticks - before.proc_ticks[pid]) / self._ticks_per_s / elapsed_s
                labels = {"pid": str(pid), "role": "main" if pid == main_pid else "worker"}
                out.append(TelemetrySample(t, self.source, names.HOST_PROC_CPU_PCT, used, labels))
        if now.established is not None:
            out.append(
                TelemetrySample(
                    t,
                    self.source,
                    names.HOST_TCP_ESTABLISHED,
                    float(now.established),
                    {"target": self._target_label()},
                )
            )
        if now.tcp is not None and before.tcp is not None:
            for key, name in (
                ("RetransSegs", names.HOST_TCP_RETRANSMITS),
                ("OutSegs", names.HOST_TCP_OUT_SEGMENTS),
            ):
                if key in now.tcp and key in before.tcp:
                    out.append(TelemetrySample(t, self.source, name, float(now.tcp[key] - before.tcp[key])))
        return out

    async def close(self) -> None:
        self._last = None


def _plain(address: str) -> str:
    """An address as /proc/net decoding writes it: IPv4-mapped IPv6 as plain IPv4, no zone."""
    addr = ipaddress.ip_address(address.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def _resolve(host: str) -> frozenset[str] | None:
    """The addresses a target host name stands for; None (match by port only) when it cannot be resolved."""
    host = host.strip("[]")
    try:
        return frozenset({_plain(host)})
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        logger.warning("telemetry host: cannot resolve %s (%s); counting connections by port only", host, exc)
        return None
    return frozenset(_plain(str(info[4][0])) for info in infos)
