"""Start a test server in its own process and stop it again, with bounded waits.

``start_slot_server(slots=8, token_delay_ms=5, fault_rate={"reset": 0.1})`` turns keyword options into
the server's command-line flags (``token_delay_ms`` -> ``--token-delay-ms``; ``True`` -> a bare flag;
a dict -> repeated ``NAME=VALUE``), waits for its ``PORT`` line and for ``/health``, yields
``(base_url, process)`` and terminates the process on exit. A server that fails to start raises
``RuntimeError`` with the tail of its stderr.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import orjson

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


def _flags(opts: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, dict):
            for name, item in value.items():
                args += [flag, f"{name}={item}"]
        else:
            args += [flag, str(value)]
    return args


def _stderr_tail(err: IO[bytes]) -> str:
    err.seek(0)
    return err.read()[-2000:].decode("utf-8", errors="replace")


def _read_port(proc: subprocess.Popen[bytes], deadline: float) -> int:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    line = b""
    try:
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            data = os.read(proc.stdout.fileno(), 256)
            if not data:
                break
            line += data
    finally:
        sel.close()
    if not line.startswith(b"PORT "):
        raise RuntimeError(f"server printed no 'PORT <n>' line (got {line!r})")
    return int(line.split()[1])


def _wait_healthy(base_url: str, deadline: float) -> None:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=2.0) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise RuntimeError(f"{base_url}/health did not answer 200 in time (last error: {last})")


@contextmanager
def start_server_module(
    module: str, *, startup_timeout_s: float = STARTUP_TIMEOUT_S, **opts: Any
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run ``python -m <module> --port 0 <flags>`` from the repository root; see the module docstring."""
    cmd = [sys.executable, "-m", module, "--port", "0", *_flags(opts)]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=err)
        try:
            deadline = time.monotonic() + startup_timeout_s
            try:
                port = _read_port(proc, deadline)
                base_url = f"http://127.0.0.1:{port}"
                _wait_healthy(base_url, deadline)
            except RuntimeError as exc:
                raise RuntimeError(f"{' '.join(cmd)} failed to start: {exc}\n{_stderr_tail(err)}") from exc
            yield base_url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
            if proc.stdout is not None:
                proc.stdout.close()


@contextmanager
def start_slot_server(**opts: Any) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The slot server (``tests.servers.slot_server``) with these options; yields (base_url, process)."""
    with start_server_module("tests.servers.slot_server", **opts) as started:
        yield started


def server_stats(base_url: str) -> dict[str, Any]:
    """The server's ``/stats`` counters."""
    with urllib.request.urlopen(base_url + "/stats", timeout=5.0) as resp:
        stats: dict[str, Any] = orjson.loads(resp.read())
    return stats


def reset_stats(base_url: str) -> None:
    """Zero the counters and maxima of ``/stats`` (maxima restart from what is in flight now)."""
    req = urllib.request.Request(base_url + "/stats/reset", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=5.0):
        pass
