"""`knee find` end to end: the real CLI in its own process against a real streaming server on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from llm_knee.records.store import RunStore
from tests.servers.launch import reset_stats, server_stats, start_slot_server

FAST = [
    "--input-len", "16", "--output-len", "20", "--max-duration", "4", "--min-duration", "1.5",
    "--stability-window", "0.5", "--warmup-requests", "1", "--quiet", "--first-token-timeout", "20",
    "--timeout", "30",
]  # fmt: skip


def knee(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llm_knee", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


def only_run(out: Path) -> Path:
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="module")
def eight_slots() -> Iterator[str]:
    with start_slot_server(slots=8, token_delay_ms=5, prefill_ms_per_token=0.5) as (url, _):
        yield url


def test_eight_slot_server_is_recommended_eight(eight_slots: str, tmp_path: Path) -> None:
    """The spec case: 8 slots and a fixed per-token delay must yield 8 (± one ladder step)."""
    res = knee("find", "--url", eight_slots, "--levels", "1,2,4,8,12,16,24", "--json", "--out", str(tmp_path), *FAST,
               cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    analysis = orjson.loads(res.stdout)
    assert analysis["recommended_concurrency"] in (4, 8, 12), analysis
    assert analysis["throughput_knee"] in (4, 8, 12)
    assert analysis["safe_concurrency"] == pytest.approx(int(analysis["recommended_concurrency"] * 0.65), abs=1)
    run = only_run(tmp_path)
    for name in ("spec.json", "records.jsonl", "levels.jsonl", "result.json", "levels.csv", "report.md"):
        assert (run / name).exists(), name
    result = orjson.loads((run / "result.json").read_bytes())
    assert result["schema"] == "llm-knee/result" and result["schema_version"] == 1 and not result["partial"]
    levels = {lv["level"]: lv for lv in result["levels"]}
    # Below the slot count each user streams alone: 20 tokens at 5 ms apart.
    assert levels[4]["tpot_p50_ms"] == pytest.approx(5.0, rel=0.5)
    # Beyond it requests queue for a slot: TTFT grows, throughput does not.
    assert levels[24]["ttft_p50_ms"] > 3 * levels[4]["ttft_p50_ms"]
    assert levels[24]["output_tok_s"] < 1.3 * levels[8]["output_tok_s"]
    assert all(lv["error_rate"] == 0 for lv in result["levels"])
    # A steady level ends before its time limit; the reason is kept per level.
    assert {lv["stop_reason"] for lv in result["levels"]} <= {"steady", "max duration"}
    assert any(lv["stop_reason"] == "steady" and lv["window_s"] < 4.0 for lv in result["levels"])
    assert "Run at most" in result["analysis"]["sentence"]
    # Records are the source of truth: re-analysis gives the same answer.
    again = knee("analyze", str(run), "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert orjson.loads(again.stdout)["recommended_concurrency"] == analysis["recommended_concurrency"]
    # Every measured record of the run is on disk and none was a warm-up counted as measured.
    records = RunStore.open(run).records()
    assert sum(1 for r in records if not r.warmup) >= sum(lv["requests"] for lv in result["levels"])


def test_server_never_sees_more_than_the_level_in_flight(eight_slots: str, tmp_path: Path) -> None:
    reset_stats(eight_slots)
    res = knee("find", "--url", eight_slots, "--levels", "2,4", "--out", str(tmp_path), *FAST, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert server_stats(eight_slots)["max_in_flight"] == 4


def test_connection_refused_is_said_and_nothing_is_written(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    res = knee("find", "--url", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "runs"), *FAST, cwd=tmp_path)
    assert res.returncode == 3
    assert "refused" in res.stdout + res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--levels", "4,2"], "increasing"),
        (["--input-len", "-5"], "input"),
        (["--slo", "ttft=5"], "SLO"),
        (["--watermark", "0.9"], "watermark"),
        (["--levels", "1.5"], "whole numbers"),
    ],
)
def test_bad_arguments_get_a_clear_error(tmp_path: Path, args: list[str], message: str) -> None:
    res = knee("find", "--url", "http://127.0.0.1:9", *args, "--out", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message.lower() in (res.stdout + res.stderr).lower() and "Traceback" not in res.stderr


def test_request_faults_land_in_their_class_and_cap_the_recommendation(tmp_path: Path) -> None:
    with start_slot_server(slots=4, token_delay_ms=3, fault_rate={"http500": 0.15}, seed=3) as (url, _):
        res = knee("find", "--url", url, "--levels", "1,2,4", "--json", "--out", str(tmp_path), *FAST, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    a = orjson.loads(res.stdout)
    assert any(al["name"] == "errors" for al in a["alarms"])
    result = orjson.loads((only_run(tmp_path) / "result.json").read_bytes())
    assert sum(lv["errors"]["http_5xx"] for lv in result["levels"]) > 0
    assert a["recommended_concurrency"] is None or a["recommended_concurrency"] < 4


def test_open_loop_measures_from_the_schedule(eight_slots: str, tmp_path: Path) -> None:
    res = knee("find", "--url", eight_slots, "--rate", "--levels", "10,40", "--arrival", "constant", "--json",
               "--out", str(tmp_path), *FAST, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    result = orjson.loads((only_run(tmp_path) / "result.json").read_bytes())
    assert result["mode"] == "open"
    lv10 = result["levels"][0]
    assert lv10["req_s"] == pytest.approx(10, rel=0.25)
    assert lv10["queue_p50_ms"] is not None and lv10["queue_p50_ms"] < 50


def test_ctrl_c_keeps_every_record_and_resume_finishes_the_run(eight_slots: str, tmp_path: Path) -> None:
    slow = [a if a != "4" else "30" for a in FAST]  # long levels, so the signal lands mid-level
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_knee", "find", "--url", eight_slots, "--levels", "2,4", "--out", str(tmp_path),
         *slow, "--min-duration", "30", "--max-requests", "150"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    run: Path | None = None
    while time.monotonic() < deadline:
        runs = [p for p in tmp_path.iterdir() if p.is_dir()]
        if (
            runs
            and (runs[0] / "records.jsonl").exists()
            and (runs[0] / "records.jsonl").read_bytes().count(b"\n") >= 12
        ):
            run = runs[0]
            break
        time.sleep(0.2)
    assert run is not None, "the run never started writing records"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "--resume" in out + err and "Traceback" not in err
    on_disk = RunStore.open(run).records()
    assert len(on_disk) > 5
    levels = RunStore.open(run).levels()
    assert levels and levels[-1]["status"] == "interrupted"
    assert orjson.loads((run / "result.json").read_bytes())["partial"] is True

    res = knee("find", "--resume", str(run), "--json", cwd=tmp_path, timeout=240)
    # The resumed run keeps the original settings (levels end after 150 measured requests).
    assert res.returncode == 0, res.stderr
    store = RunStore.open(run)
    assert [e["status"] for e in store.levels()] == ["complete", "complete"]
    assert len(store.records()) > len(on_disk)  # nothing lost, more added
    assert len(store.read_spec()["sessions"]) == 2
    assert orjson.loads((run / "result.json").read_bytes())["partial"] is False
