"""`knee find --launch` with a real llama.cpp ``llama-server`` per grid point: started, swept, stopped, compared."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from llm_knee.engines.process import port_is_free
from tests.fixtures_llamacpp import knee_gguf_model, llama_server_binary  # noqa: F401
from tests.integration.test_find import FAST, knee

TEMPLATE = (
    "{binary} -m {{model}} -np {{slots}} -c {{ctx}} -t 1 --port {{port}} --host 127.0.0.1 --metrics --cont-batching"
)
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended while we looked
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def test_a_slot_grid_compares_knees_and_stops_every_engine(
    llama_server_binary: Path,  # noqa: F811
    knee_gguf_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    template = TEMPLATE.format(binary=llama_server_binary)
    res = knee(
        "find", "--launch", template, "--grid", "slots=1,4", "--set", f"model={knee_gguf_model}", "--set", "ctx=1024",
        "--levels", "1,2,4,8", "--json", "--out", str(tmp_path), *FAST, "--input-len", "32", "--output-len", "32",
        "--max-duration", "3", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "Engine grid" in res.stderr
    summary = orjson.loads(res.stdout)
    points = {p["values"]["slots"]: p for p in summary["points"]}
    assert set(points) == {"1", "4"}
    for slots, p in points.items():
        assert p["error"] is None, p["error"]
        assert p["peak_tok_s"] > 0, p
        # A knee within the ladder: at the latest where the levels outgrow the slots and requests queue.
        assert p["throughput_knee"] is not None or p["latency_knee"] is not None, p
        # Requests beyond the slots only queue: no recommendation above the slot count.
        assert p["recommended_concurrency"] is not None and p["recommended_concurrency"] <= int(slots), p
        result = orjson.loads((Path(p["run_dir"]) / "result.json").read_bytes())
        assert all(lv["error_rate"] == 0 for lv in result["levels"])
        assert all(lv["mean_output_tokens"] == 32 for lv in result["levels"])
    # One slot decodes one sequence per step; four batch them.
    assert points["4"]["peak_tok_s"] > points["1"]["peak_tok_s"], summary
    assert summary["best"] == {"slots": "4"}, summary
    assert list(tmp_path.glob("grid-*.json"))
    # Each engine was stopped: its port is free again and no llama-server on this model is left.
    logs = sorted(tmp_path.glob("engine-*.log"))
    assert [log.name.rsplit("-", 1)[1] for log in logs] == ["slots1.log", "slots4.log"]
    for log in logs:
        found = LISTENING.search(log.read_text(errors="replace"))
        assert found, log.read_text(errors="replace")[-2000:]
        assert port_is_free(int(found[1])), f"{log.name}: port {found[1]} still taken"
    assert processes_mentioning(str(knee_gguf_model)) == []


def test_an_engine_that_cannot_load_its_model_fails_with_its_log_tail(
    llama_server_binary: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    ghost = tmp_path / "no-such-model.gguf"
    res = knee(
        "find", "--launch", TEMPLATE.format(binary=llama_server_binary), "--grid", "slots=2", "--set", f"model={ghost}",
        "--set", "ctx=512", "--levels", "1,2", "--json", "--out", str(tmp_path), *FAST, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    (point,) = orjson.loads(res.stdout)["points"]
    error = point["error"]
    assert "llama-server exited with status" in error and "before becoming healthy" in error
    # The engine's own words, from its log: what it could not load.
    assert "failed to load model" in error and str(ghost) in error
    assert point["run_dir"] is None and point["recommended_concurrency"] is None
    assert processes_mentioning(str(ghost)) == []
