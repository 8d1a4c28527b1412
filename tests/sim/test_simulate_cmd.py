"""`knee simulate`: the ladder in simulated time, shown and judged like `knee find`, with a what-if per knob."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from llm_knee.sim.simulate_cmd import register

# Short prompts and answers keep each level to a few thousand simulated steps.
FAST = ["--input-len", "128", "--output-len", "32", "--duration", "5"]
LADDER = ["--levels", "1,2,4,8,16,32,64"]


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)

    @app.callback()
    def root() -> None:  # a group, so the command is called by its name as under `knee`
        pass

    return app


def run(*args: str) -> Result:
    return CliRunner().invoke(_app(), ["simulate", *args], env={"COLUMNS": "200"})


def run_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_prints_the_level_table_knees_recommendation_and_the_simulated_profile() -> None:
    result = run(*FAST, *LADDER, "--max-num-seqs", "16")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Simulated, not measured" in out
    assert "Llama-3.1-8B bf16 on 1 x H100-SXM" in out and "max_num_seqs 16" in out
    assert "Levels" in out and "TTFT99" in out
    for level in ("1", "16", "64"):
        assert re.search(rf"^\s*{level}\s+[\d,]+\s", out, re.MULTILINE), level  # a table row for the level
    # 16 sequences per step: throughput stops growing at 16 users and the queue builds past it.
    assert "Throughput knee: 16" in out
    assert "Recommendation" in out and "Run at most 16 concurrent requests" in out
    assert "verdict queueing at 32" in out


def test_json_has_the_analyze_keys_and_the_profile() -> None:
    doc = run_json(*FAST, *LADDER, "--max-num-seqs", "16")
    for key in ("throughput_knee", "latency_knee", "recommended_concurrency", "safe_concurrency", "confidence"):
        assert key in doc
    assert isinstance(doc["alarms"], list)
    assert doc["throughput_knee"] == 16
    assert doc["recommended_concurrency"] == 16
    assert doc["safe_concurrency"] == 10  # 65 % watermark
    assert [lv["level"] for lv in doc["levels"]] == [1, 2, 4, 8, 16, 32, 64]
    assert doc["simulated"] is True
    assert doc["profile"]["model"] == "Llama-3.1-8B"
    assert doc["profile"]["engine"]["max_num_seqs"] == 16
    assert doc["partial"] is False


def test_engine_queue_feeds_the_queueing_latency_knee() -> None:
    """The engine's waiting queue, renamed to the server's metric, gives the latency knee a queueing method."""
    doc = run_json(*FAST, *LADDER, "--max-num-seqs", "16")
    methods = {m["method"]: m["level"] for m in doc["knees"]["latency"]["methods"]}
    assert methods["queueing"] == 16


def test_what_if_prints_one_row_per_value_and_json_one_entry_per_value() -> None:
    result = run(*FAST, *LADDER, "--max-num-seqs", "8,32")
    assert result.exit_code == 0, result.stderr
    assert "What-if: max_num_seqs" in result.stdout
    assert result.stdout.count("Throughput knee:") == 2
    doc = run_json(*FAST, *LADDER, "--max-num-seqs", "8,32")
    assert doc["what_if"] == "max_num_seqs"
    assert set(doc["results"]) == {"8", "32"}
    assert [row["value"] for row in doc["comparison"]] == [8, 32]
    assert doc["results"]["8"]["profile"]["engine"]["max_num_seqs"] == 8


def test_a_smaller_max_num_seqs_never_raises_the_knee() -> None:
    doc = run_json(*FAST, *LADDER, "--max-num-seqs", "4,8,16,32")
    rows = doc["comparison"]
    knees = [row["throughput_knee"] for row in rows]
    assert all(k is not None for k in knees)
    assert knees == sorted(knees), knees
    recommended = [row["recommended_concurrency"] for row in rows]
    assert recommended == sorted(recommended), recommended
    assert knees[0] < knees[-1]
    peaks = [row["peak_output_tok_s"] for row in rows]
    assert peaks == sorted(peaks), peaks


def test_what_if_values_are_judged_on_one_ladder() -> None:
    """The knee moves with the sweep range, so a value whose ladder stopped early is rerun on the longest one."""
    doc = run_json(*FAST, "--max-num-seqs", "16,128")
    small = [lv["level"] for lv in doc["results"]["16"]["levels"]]
    large = [lv["level"] for lv in doc["results"]["128"]["levels"]]
    assert small == large and max(large) > 64


def test_default_ladder_is_extended_while_throughput_still_climbs() -> None:
    result = run(*FAST, "--max-num-seqs", "128", "--json")
    assert result.exit_code == 0, result.stderr
    levels = [lv["level"] for lv in json.loads(result.stdout)["levels"]]
    assert levels[:12] == [1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64]
    assert levels[12:13] == [96]  # 64 users still gained ≥ 5 %, so the ladder went on
    assert max(levels) <= 256  # never past 2 x max_num_seqs
    assert "ladder extended past 64 with 96" in result.stderr


def test_given_levels_are_not_extended_unless_asked() -> None:
    levels = [lv["level"] for lv in run_json(*FAST, "--levels", "8,16,32", "--max-num-seqs", "64")["levels"]]
    assert levels == [8, 16, 32]
    extended = [
        lv["level"] for lv in run_json(*FAST, "--levels", "8,16,32", "--max-num-seqs", "64", "--extend")["levels"]
    ]
    assert extended[:3] == [8, 16, 32] and len(extended) > 3 and max(extended) <= 128


def test_same_seed_same_figures_other_seed_other_draws() -> None:
    args = ["--input-len", "normal:128,32", "--output-len", "uniform:16,48", "--duration", "5", "--levels", "4,16"]
    first = run_json(*args, "--seed", "3")
    again = run_json(*args, "--seed", "3")
    other = run_json(*args, "--seed", "4")
    assert first == again
    assert first["levels"] != other["levels"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "Llama-3.1-70B"], ["does not fit", "short by", "GiB", "quantize to fp8", "--tp 2"]),
        (["--model", "llama-9b"], ["unknown model", "closest known", "Llama-3.1-8B"]),
        (["--gpu", "H900"], ["unknown GPU", "closest known", "H100-SXM"]),
        (["--input-len", "131000"], ["exceeds", "maximum context of 131072"]),
        (["--input-len", "0"], ["--input-len", "at least 1 token"]),
        (["--output-len", "-4"], ["--output-len", "at least 1 token"]),
        (
            ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "256", "--max-num-seqs", "64"],
            ["512-token prompt can never schedule", "chunked prefill"],
        ),
        (["--max-num-seqs", "64,512", "--max-num-batched-tokens", "256"], ["--max-num-seqs 512", "max_num_seqs"]),
        (["--max-num-seqs", "8,16", "--gpu-memory-utilization", "0.8,0.9"], ["one knob at a time"]),
        (["--levels", "1,2.5"], ["whole numbers"]),
        (["--duration", "0"], ["--duration"]),
        (["--prefix-hit-rate", "0.5"], ["--enable-prefix-caching"]),
        (["--enable-prefix-caching", "--shared-prefix", "600"], ["longer than the shortest prompt"]),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_runs(args: list[str], expected: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert result.stdout == ""  # no profile line, no table: nothing ran
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for text in expected:
        assert text in lines[0]
