"""`knee find` with no --url measures the embedded simulated engine, and always stops it afterwards."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson

from tests.integration.test_find import knee

SHORT = ["--levels", "1,8", "--input-len", "64", "--output-len", "32", "--max-duration", "3", "--min-duration", "1",
         "--warmup-requests", "1", "--quiet"]  # fmt: skip


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def sim_port(text: str) -> int:
    m = re.search(r"embedded simulated engine at\s+http://127\.0\.0\.1:(\d+)", " ".join(text.split()))
    assert m, text
    return int(m[1])


def test_no_url_runs_the_simulated_default_and_says_so(tmp_path: Path) -> None:
    res = knee("find", *SHORT, "--json", "--out", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    said = " ".join(res.stderr.split())
    assert "Llama-3.1-8B, BF16, one H100-SXM" in said and "simulated numbers" in said
    a = orjson.loads(res.stdout)
    assert a["levels"][1]["output_tok_s"] > 4 * a["levels"][0]["output_tok_s"]  # 8 users batch well on an H100
    # Decode of an 8B model in BF16 on one H100: ~8 ms a token at batch 1 (about 120 tok/s per user).
    assert 60 < a["levels"][0]["output_tok_s"] < 200
    assert not port_open(sim_port(res.stderr)), "the embedded engine was left running"
    result = orjson.loads(next(tmp_path.glob("*/result.json")).read_bytes())
    assert "embedded simulated engine" in result["target"]["note"]


def test_ctrl_c_stops_the_embedded_engine_too(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_knee", "find", *SHORT, "--max-duration", "60", "--min-duration", "60",
         "--out", str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = [p for p in tmp_path.iterdir() if p.is_dir()]
        if runs and (runs[0] / "records.jsonl").exists():
            break
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert not port_open(sim_port(out))
    # Resuming starts a new embedded engine (the old one is gone) and finishes the run.
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    res = knee("find", "--resume", str(run), "--max-duration", "3", cwd=tmp_path, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert orjson.loads((run / "result.json").read_bytes())["partial"] is False
