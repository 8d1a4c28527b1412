"""Start and stop one ``llama-server`` on a free 127.0.0.1 port.

::

    with LlamaServer(binary, model, slots=4, threads=2, ctx_size=8192) as server:
        requests.post(server.base_url + "/v1/completions", ...)

``ctx_size`` is the server's ``-c``: the whole KV cache, split evenly across the ``slots`` (so each
request may use ``ctx_size // slots`` tokens, prompt and output together). Requests beyond the slots
wait in the server's queue. The server runs with continuous batching and ``/metrics`` on.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from llm_knee.engines.errors import EngineStartError
from llm_knee.engines.process import ServerProcess, free_port

HOST = "127.0.0.1"
HELP_TIMEOUT_S = 30.0
# A port picked free can be taken by someone else before the server binds it; try a few.
PORT_ATTEMPTS = 3


def llama_server_options(binary: Path) -> frozenset[str]:
    """The long options ``binary --help`` lists; raises :class:`EngineStartError` if it cannot run."""
    try:
        result = subprocess.run(
            [str(binary), "--help"],
            capture_output=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineStartError(f"cannot run {binary} --help: {exc}") from exc
    text = (result.stdout + result.stderr).decode("utf-8", errors="replace")
    options = frozenset(
        word.rstrip(",") for word in text.split() if word.startswith("--") and len(word) > 2 and word[2] != "-"
    )
    if result.returncode != 0 or "--parallel" not in options:
        tail = "\n".join(text.splitlines()[-20:])
        raise EngineStartError(f"{binary} does not look like a working llama-server (--help gave):\n{tail}")
    return options


class LlamaServer:
    """A ``llama-server`` process serving ``model`` with ``slots`` parallel sequences."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        *,
        slots: int = 4,
        threads: int = 2,
        ctx_size: int | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.ctx_size = ctx_size if ctx_size is not None else 2048 * slots
        if self.ctx_size < slots:
            raise ValueError(f"ctx_size {self.ctx_size} leaves no context for each of {slots} slots")
        self.binary = Path(binary)
        self.model = Path(model)
        self.slots = slots
        self.threads = threads
        self.extra_args = tuple(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self._log_path = log_path
        self._process: ServerProcess | None = None
        self._port: int | None = None

    @property
    def ctx_per_slot(self) -> int:
        """Tokens one request may hold (prompt + output) under the default split of the KV cache."""
        return self.ctx_size // self.slots

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash, no ``/v1``)."""
        return f"http://{HOST}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self._process.log_path if self._process is not None else self._log_path

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    def log_tail(self, max_lines: int = 40) -> str:
        return self._process.log_tail(max_lines) if self._process is not None else ""

    def argv(self, port: int, options: frozenset[str]) -> list[str]:
        """The command line for ``port``; options the binary lacks (``--no-webui``) are left out."""
        argv = [
            str(self.binary), "-m", str(self.model), "--host", HOST, "--port", str(port),
            "-np", str(self.slots), "-c", str(self.ctx_size), "-t", str(self.threads),
            "--cont-batching", "--metrics",
        ]  # fmt: skip
        if "--no-webui" in options:
            argv.append("--no-webui")
        return [*argv, *self.extra_args]

    def start(self) -> LlamaServer:
        """Start the server and wait for ``/health``; raise :class:`EngineStartError` with its log tail."""
        if self._process is not None:
            raise RuntimeError("this LlamaServer was already started; make a new one")
        if not self.model.is_file():
            raise EngineStartError(f"model file {self.model} does not exist; write one with write_tiny_llama_gguf")
        options = llama_server_options(self.binary)
        attempt = 0
        while True:
            attempt += 1
            port = free_port(HOST)
            process = ServerProcess(
                self.argv(port, options),
                health_url=f"http://{HOST}:{port}/health",
                log_path=self._log_path,
                startup_timeout_s=self.startup_timeout_s,
                stop_grace_s=self.stop_grace_s,
            )
            try:
                process.start()
            except EngineStartError:
                if attempt < PORT_ATTEMPTS and "bind" in process.log_tail().lower():
                    continue
                raise
            self._process, self._port = process, port
            return self

    def stop(self) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL after ``stop_grace_s``); return its exit status."""
        if self._process is None:
            return None
        return self._process.stop()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
