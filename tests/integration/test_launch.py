"""`knee find --launch`: one engine process per grid point, started, swept, stopped, compared."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from llm_knee.commands.launch import check_template, grid_points, parse_assignments, render_command
from tests.integration.test_find import FAST

REPO = Path(__file__).resolve().parents[2]
SLOT_SERVER = f"{sys.executable} -m tests.servers.slot_server --port {{port}} --slots {{slots}} --token-delay-ms 5"


def knee(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llm_knee", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_grid_of_slot_counts_moves_the_knee_with_the_slots(tmp_path: Path) -> None:
    res = knee("find", "--launch", SLOT_SERVER, "--grid", "slots=2,4", "--levels", "1,2,4,8", "--json",
               "--out", str(tmp_path), *FAST)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    summary = orjson.loads(res.stdout)
    points = {p["values"]["slots"]: p for p in summary["points"]}
    assert points["2"]["recommended_concurrency"] in (1, 2, 4)
    assert points["4"]["recommended_concurrency"] in (2, 4, 8)
    assert points["4"]["peak_tok_s"] > 1.5 * points["2"]["peak_tok_s"]
    assert summary["best"] == {"slots": "4"}
    assert "Engine grid" in res.stderr or "Engine grid" in res.stdout
    # Each engine was stopped: nothing is left listening on the ports they had.
    assert all(p["error"] is None for p in summary["points"])
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == 2


def test_an_engine_that_cannot_start_is_reported_with_its_log_tail(tmp_path: Path) -> None:
    failing = f"{sys.executable} -c \"import sys; print('no such model: {{model}}'); sys.exit(3)\" {{port}}"
    res = knee("find", "--launch", failing, "--set", "model=ghost.gguf", "--levels", "1,2", "--out", str(tmp_path),
               *FAST, timeout=60)  # fmt: skip
    assert res.returncode == 1
    out = res.stdout + res.stderr
    assert "exited with status 3" in out and "no such model: ghost.gguf" in out and "Traceback" not in out


def test_template_errors_are_caught_before_anything_starts() -> None:
    with pytest.raises(ValueError, match=r"\{port\}"):
        check_template("llama-server -np {slots}", {"slots": ["4"]}, {})
    with pytest.raises(ValueError, match=r"uses \{model\} but nothing sets it"):
        check_template("llama-server -m {model} --port {port}", {}, {})
    with pytest.raises(ValueError, match="do not appear"):
        check_template("llama-server --port {port}", {"slots": ["4"]}, {})
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_assignments(["slots"], "--grid")
    assert grid_points({"a": ["1", "2"], "b": ["x"]}) == [{"a": "1", "b": "x"}, {"a": "2", "b": "x"}]
    assert render_command("srv -m '{m} x' --port {port}", {"m": "/a b", "port": "9"}) == [
        "srv",
        "-m",
        "/a b x",
        "--port",
        "9",
    ]
