"""ServerProcess: any server command line, healthy on a 200, failures carry the log tail, stops for sure."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from llm_knee.engines.errors import EngineStartError
from llm_knee.engines.process import ServerProcess, free_port, port_is_free, read_log_tail

# A stdlib HTTP server whose /health answers with the status given in argv[2]; "ignore-term" makes
# it survive SIGTERM so that the SIGKILL fallback is exercised.
SERVER = """
import http.server, signal, sys
port, status = int(sys.argv[1]), int(sys.argv[2])
if "ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(status if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
print("listening on", port, flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _server(port: int, status: int, *extra: str) -> list[str]:
    return [sys.executable, "-c", SERVER, str(port), str(status), *extra]


def test_starts_when_health_answers_200_and_stops_leaving_the_port_free(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    proc = ServerProcess(_server(port, 200), health_url=f"http://127.0.0.1:{port}/health", log_path=log)
    with proc:
        assert proc.running
        assert not port_is_free(port)
        assert "listening on" in proc.log_tail()
    assert not proc.running
    assert proc.returncode == -15
    assert port_is_free(port)
    assert log.exists()  # a log the caller named is the caller's to keep


def test_a_process_that_exits_at_once_reports_its_status_and_output() -> None:
    argv = [sys.executable, "-c", "import sys; print('cannot load the model'); sys.exit(3)"]
    proc = ServerProcess(argv, health_url=f"http://127.0.0.1:{free_port()}/health")
    with pytest.raises(EngineStartError, match=r"(?s)exited with status 3.*cannot load the model"):
        proc.start()
    assert proc.log_path is not None and proc.log_path.exists()  # kept for the post-mortem
    proc.log_path.unlink()


def test_a_server_that_never_gets_healthy_is_stopped_after_the_timeout() -> None:
    port = free_port()
    proc = ServerProcess(_server(port, 503), health_url=f"http://127.0.0.1:{port}/health", startup_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(EngineStartError, match=r"not healthy after 1 s \(last: HTTP 503\)"):
        proc.start()
    assert time.monotonic() - started < 5.0
    assert not proc.running
    assert port_is_free(port)


def test_a_server_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    port = free_port()
    proc = ServerProcess(
        _server(port, 200, "ignore-term"), health_url=f"http://127.0.0.1:{port}/health", stop_grace_s=0.5
    )
    proc.start()
    started = time.monotonic()
    assert proc.stop() == -9
    assert time.monotonic() - started < 3.0
    assert port_is_free(port)


def test_an_unknown_program_is_a_start_error() -> None:
    with pytest.raises(EngineStartError, match="cannot run"):
        ServerProcess(["/nonexistent/llama-server"], health_url="http://127.0.0.1:1/health").start()


def test_the_log_tail_is_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert read_log_tail(log, 3) == "line 97\nline 98\nline 99"
    assert read_log_tail(tmp_path / "missing.log") == ""
