"""Fixtures for the telemetry tests: recorded data and a real /metrics server on 127.0.0.1."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
METRICS = DATA / "metrics"
NVML_TRACE = DATA / "nvml_h100_power_cap.json"


def start_metrics_server(prefix: str) -> tuple[subprocess.Popen[str], int]:
    """Start ``metrics_server.py`` serving ``<prefix>_NNN.prom`` pages; returns the process and its port."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "metrics_server.py"), str(METRICS), prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20.0)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("PORT "):
        proc.kill()
        _, err = proc.communicate(timeout=5)
        raise RuntimeError(f"metrics server did not start: {line!r} {err}")
    return proc, int(line.split()[1])


@pytest.fixture
def metrics_server() -> Iterator[Callable[[str], int]]:
    """Start a metrics server for an engine's recorded pages; every server is stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(prefix: str) -> int:
        proc, port = start_metrics_server(prefix)
        procs.append(proc)
        return port

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=5)


class FakeClock:
    """A session clock the test moves by hand (nanoseconds since the anchor)."""

    def __init__(self, t_ns: int = 0) -> None:
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns

    def advance(self, seconds: float) -> None:
        self.t_ns += int(seconds * 1e9)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()
