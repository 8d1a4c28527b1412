"""Run a server command in its own process: output to a log file, wait for health, stop it cleanly.

:class:`ServerProcess` knows nothing about which engine it runs: it takes a command line and a health
URL. Waits are bounded; a process that exits or stays unhealthy raises :class:`EngineStartError`
carrying the tail of its log, and :meth:`ServerProcess.stop` sends SIGTERM, then SIGKILL after a grace
period.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from llm_knee.engines.errors import EngineStartError

HEALTH_POLL_S = 0.05
HEALTH_REQUEST_TIMEOUT_S = 2.0
KILL_WAIT_S = 5.0
TAIL_BYTES = 64 * 1024


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (a listening socket would refuse our bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR a port in TIME_WAIT from a closed client would look taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def read_log_tail(path: Path, max_lines: int = 40) -> str:
    """The last ``max_lines`` lines of a log file (``""`` if it does not exist)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-max_lines:])


class ServerProcess:
    """One server process started from ``argv`` and considered ready when ``health_url`` answers 200.

    When no ``log_path`` is given, the output goes to a temporary file that is deleted on a stop after
    a successful start and kept (its path is in the error) when the start failed.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        health_url: str,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 10.0,
        new_session: bool = False,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a program")
        if startup_timeout_s <= 0 or stop_grace_s < 0:
            raise ValueError("startup_timeout_s must be positive and stop_grace_s not negative")
        self.argv: tuple[str, ...] = tuple(str(a) for a in argv)
        self.health_url = health_url
        self._given_log = log_path
        self.log_path: Path | None = log_path
        self._env = dict(env) if env is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        # In its own session the child does not receive the terminal's Ctrl-C; its owner stops it.
        self._new_session = new_session
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_ok = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def log_tail(self, max_lines: int = 40) -> str:
        return read_log_tail(self.log_path, max_lines) if self.log_path is not None else ""

    def start(self) -> None:
        """Launch the process and wait until it is healthy; raise :class:`EngineStartError` otherwise."""
        if self._proc is not None:
            raise RuntimeError("this ServerProcess was already started; make a new one")
        if self._given_log is None:
            fd, name = tempfile.mkstemp(prefix=f"{Path(self.argv[0]).name}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        assert self.log_path is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._env,
                    start_new_session=self._new_session,
                )
            except OSError as exc:
                raise EngineStartError(f"cannot run {self.argv[0]}: {exc}") from exc
        try:
            self._wait_healthy()
        except BaseException:
            # Also on KeyboardInterrupt: never leave a half-started server behind.
            self._terminate()
            raise
        self._started_ok = True

    def stop(self) -> int | None:
        """Stop the process (SIGTERM, SIGKILL after ``stop_grace_s``); return its exit status."""
        if self._proc is None:
            return None
        code = self._terminate()
        if self._started_ok and self._given_log is None and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
        return code

    def _terminate(self) -> int:
        proc = self._proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=KILL_WAIT_S)
        return proc.returncode

    def _wait_healthy(self) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        # Straight to the server: an http_proxy in the environment must not intercept health checks.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        last = "no answer yet"
        while True:
            code = proc.poll()
            if code is not None:
                raise EngineStartError(self._failure(f"exited with status {code} before becoming healthy"))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EngineStartError(
                    self._failure(f"not healthy after {self.startup_timeout_s:.0f} s (last: {last})")
                )
            try:
                timeout = min(HEALTH_REQUEST_TIMEOUT_S, remaining)
                with opener.open(self.health_url, timeout=timeout) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"  # 503 while the model loads
            except (urllib.error.URLError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
            time.sleep(min(HEALTH_POLL_S, max(0.0, deadline - time.monotonic())))

    def _failure(self, what: str) -> str:
        return (
            f"{Path(self.argv[0]).name} {what}.\ncommand: {' '.join(self.argv)}\n"
            f"log {self.log_path} (last lines):\n{self.log_tail()}"
        )

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
