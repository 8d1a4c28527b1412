"""The host sampler reads this machine's real /proc: CPU per core, our own CPU, TCP to the target.

The parsers are also checked against fixed /proc texts, so their arithmetic is pinned down exactly.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llm_knee.telemetry import names
from llm_knee.telemetry.host import (
    CpuTimes,
    HostSampler,
    count_established,
    cpu_percentages,
    parse_pid_cpu_ticks,
    parse_proc_stat,
    parse_tcp_snmp,
)

PROC_STAT = """\
cpu  100 10 50 800 20 5 5 10 0 0
cpu0 60 10 30 390 5 3 2 0 0 0
cpu1 40 0 20 410 15 2 3 10 0 0
intr 12345 0 0
ctxt 999
"""

TCP4 = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A001 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 1 1
   1: 0100007F:A002 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 2 1
   2: 0100007F:A003 0100007F:1F90 06 00000000:00000000 00:00000000 00000000  1000        0 0 1
   3: 0100007F:1F90 0100007F:A001 01 00000000:00000000 00:00000000 00000000  1000        0 4 1
   4: 0A00000A:A004 0200000A:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 5 1
"""

TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000001000000:B001 00000000000000000000000001000000:1F90 01 00000000:00000000
   1: 0000000000000000FFFF00000100007F:B002 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000
"""

SNMP = (
    "Ip: Forwarding DefaultTTL InReceives\n"
    "Ip: 1 64 1000\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs"
    " OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
    "Tcp: 1 200 120000 -1 50 40 1 2 3 10000 9000 17 0 5 0\n"
)


def test_proc_stat_is_split_per_core_with_a_machine_total() -> None:
    cpus = parse_proc_stat(PROC_STAT)
    assert set(cpus) == {"all", "0", "1"}
    assert cpus["1"] == CpuTimes(40, 0, 20, 410, 15, 2, 3, 10)


def test_cpu_percentages_separate_user_from_system_and_count_steal_as_busy() -> None:
    before = CpuTimes(0, 0, 0, 0, 0, 0, 0, 0)
    after = CpuTimes(user=30, nice=10, system=15, idle=30, iowait=10, irq=3, softirq=2, steal=0)
    user, system, busy = cpu_percentages(before, after)  # type: ignore[misc]
    assert (user, system, busy) == (pytest.approx(40.0), pytest.approx(20.0), pytest.approx(60.0))
    assert cpu_percentages(after, after) is None


def test_process_cpu_ticks_survive_a_command_name_with_spaces_and_parentheses() -> None:
    fields = " ".join(str(i) for i in range(3, 53))  # field n holds the number n from state (3) on
    line = f"4242 (my (odd) proc) {fields}"
    assert parse_pid_cpu_ticks(line.replace(" 3 ", " S ", 1)) == 14 + 15


def test_established_connections_are_matched_by_remote_port_and_address() -> None:
    assert count_established(TCP4, 8080) == 3  # the TIME_WAIT line and the server side do not count
    assert count_established(TCP4, 8080, frozenset({"127.0.0.1"})) == 2
    assert count_established(TCP4, 8080, frozenset({"10.0.0.2"})) == 1
    assert count_established(TCP6, 8080, frozenset({"::1"})) == 1
    assert count_established(TCP6, 8080, frozenset({"127.0.0.1"})) == 1  # IPv4-mapped counts as IPv4
    assert count_established(TCP4, 9999) == 0


def test_tcp_counters_are_read_from_snmp() -> None:
    tcp = parse_tcp_snmp(SNMP)
    assert tcp["RetransSegs"] == 17
    assert tcp["OutSegs"] == 9000


async def test_real_cpu_readings_cover_every_core_and_stay_in_range(fake_clock) -> None:
    sampler = HostSampler()
    status = await sampler.open(fake_clock)
    assert status.available, status.reason
    await asyncio.sleep(0.3)
    fake_clock.advance(0.3)
    samples = await sampler.sample(fake_clock)
    await sampler.close()
    cores = {s.labels["cpu"] for s in samples if s.name == names.HOST_CPU_BUSY_PCT}
    stat_lines = Path("/proc/stat").read_text().splitlines()
    stat_cores = {line.split()[0][3:] for line in stat_lines if line.startswith("cpu") and line[3] != " "}
    assert cores == stat_cores | {"all"}
    by_core = {(s.name, s.labels.get("cpu")): s.value for s in samples if "cpu" in s.labels}
    for core in cores:
        user = by_core[(names.HOST_CPU_USER_PCT, core)]
        system = by_core[(names.HOST_CPU_SYSTEM_PCT, core)]
        busy = by_core[(names.HOST_CPU_BUSY_PCT, core)]
        assert 0.0 <= user <= 100.0 and 0.0 <= system <= 100.0 and 0.0 <= busy <= 100.0
        assert user + system <= busy + 1e-9
    assert all(s.t_ns == fake_clock.t_ns for s in samples)
    retrans = [s.value for s in samples if s.name == names.HOST_TCP_RETRANSMITS]
    assert len(retrans) == 1 and retrans[0] >= 0 and retrans[0] == int(retrans[0])


def _own_cpu(samples: list) -> float:
    (value,) = [s.value for s in samples if s.name == names.HOST_PROC_CPU_PCT and s.labels["role"] == "main"]
    return value


async def test_a_busy_thread_raises_our_own_process_cpu(fake_clock) -> None:
    sampler = HostSampler()
    await sampler.open(fake_clock)
    await asyncio.sleep(0.5)
    idle = _own_cpu(await sampler.sample(fake_clock))

    stop = time.monotonic() + 0.6

    def spin() -> None:
        x = 0
        while time.monotonic() < stop:
            x += 1

    thread = threading.Thread(target=spin)
    thread.start()
    await asyncio.to_thread(thread.join, 5.0)
    busy = _own_cpu(await sampler.sample(fake_clock))
    await sampler.close()
    assert idle < 20.0
    assert busy > idle + 30.0


async def test_worker_processes_are_measured_under_their_own_pid(fake_clock) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.monotonic() + 3\nwhile time.monotonic() < t: pass"]
    )
    try:
        sampler = HostSampler(pids=lambda: (os.getpid(), child.pid))
        await sampler.open(fake_clock)
        await asyncio.sleep(0.6)
        samples = await sampler.sample(fake_clock)
        await sampler.close()
    finally:
        child.kill()
        child.wait(timeout=5)
    (worker,) = [s for s in samples if s.name == names.HOST_PROC_CPU_PCT and s.labels["pid"] == str(child.pid)]
    assert worker.labels["role"] == "worker"
    assert worker.value > 30.0


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_open_connections_to_the_target_are_counted(fake_clock, host: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        sampler = HostSampler((host, port))
        status = await sampler.open(fake_clock)
        assert f"tcp to {host}:{port}" in status.detail
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
        accepted = [listener.accept()[0] for _ in clients]
        try:
            during = await sampler.sample(fake_clock)
        finally:
            for s in clients + accepted:
                s.close()
        after = await sampler.sample(fake_clock)
        await sampler.close()

    def established(samples: list) -> float:
        (value,) = [s.value for s in samples if s.name == names.HOST_TCP_ESTABLISHED]
        return value

    assert established(during) == 3
    assert established(after) == 0
    assert [s.labels for s in during if s.name == names.HOST_TCP_ESTABLISHED] == [{"target": f"{host}:{port}"}]


async def test_without_proc_the_sampler_says_why_once_and_yields_nothing(tmp_path, fake_clock, caplog) -> None:
    sampler = HostSampler(proc_root=tmp_path)
    with caplog.at_level(logging.WARNING, logger="llm_knee.telemetry"):
        status = await sampler.open(fake_clock)
        assert await sampler.sample(fake_clock) == []
    assert not status.available
    assert "needs Linux /proc" in status.reason
    assert sampler.unavailable_reason == status.reason
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
