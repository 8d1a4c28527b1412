"""`knee plan` from the command line: JSON keys, console sections, compare table, edge mode, --explain,
--simulate, and bad input ending in one clear line with exit code 2."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from llm_knee.plan.cli import register


def run(*args: str) -> Result:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def main() -> None:  # keeps `plan` a subcommand, as in the real `knee` app
        pass

    register(app)
    return CliRunner().invoke(app, ["plan", *args], env={"COLUMNS": "200"})


def run_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_json_has_the_stable_keys_with_exact_values() -> None:
    doc = run_json("--model", "llama-3.1-8b", "--gpu", "h100", "--target-qps", "20")
    for key in (
        "weights_bytes", "kv_bytes_per_token", "kv_bytes_per_request", "max_concurrency_memory",
        "max_concurrency_memory_safe", "predicted_knee", "gpus_needed", "fits", "ladder", "knee_candidates",
        "replica_qps", "explain",
    ):  # fmt: skip
        assert key in doc, key
    assert doc["fits"] is True
    assert doc["weights_bytes"] == 8_030_261_248 * 2
    assert doc["kv_bytes_per_token"] == 131072
    assert doc["kv_bytes_per_request"] == 131072 * 768
    assert doc["max_concurrency_memory"] == 586
    assert doc["gpus_needed"] == 2
    assert doc["inputs"]["efficiency"] == 0.6
    assert isinstance(doc["replica_qps"], float) and doc["replica_qps"] != round(doc["replica_qps"], 2)
    assert {f["key"] for f in doc["explain"]} >= {"weights_bytes", "predicted_knee", "gpus_needed", "replica_qps"}


def test_json_without_a_target_has_no_gpu_count() -> None:
    doc = run_json("--model", "llama-3.1-8b", "--gpu", "h100")
    assert doc["gpus_needed"] is None and doc["simulation"] is None


def test_console_shows_every_section() -> None:
    result = run("--model", "llama-3.1-8b", "--gpu", "h100", "--target-qps", "20", "--price-per-gpu-hour", "2.5")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in (
        "Memory", "max concurrency (exact)", "max concurrency (0.85 safety)", "Speed", "Predicted knee: 88",
        "compute_bound", "Target 20 req/s: 2 GPUs", "25% headroom", "per million output tokens",
    ):  # fmt: skip
        assert text in out, text


def test_explain_prints_formulas_with_their_inputs() -> None:
    result = run("--model", "llama-3.1-8b", "--gpu", "h100", "--target-qps", "20", "--explain")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Every figure, its formula and its inputs" in out
    assert "inputs:  8030261248 x 2" in out  # weights = parameters x bytes
    assert "inputs:  2 x 32 x 8 x 128 x 2" in out  # KV per token with 8 KV heads
    assert "floor(450673 / 768)" in out
    assert "ceil(20 / (23.5" in out  # GPUs = ceil(target / (replica QPS x efficiency))


def test_compare_cards_prints_one_row_per_card() -> None:
    result = run(
        "--model", "llama-3.1-8b", "--gpu", "a100-80g,h100-sxm,l40s,rtx-4090", "--target-qps", "10",
        "--price-per-gpu-hour", "1.8,3,1,0.4",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for card in ("A100-80G-SXM", "H100-SXM", "L40S", "RTX-4090"):
        assert card in result.stdout
    doc = run_json("--model", "llama-3.1-8b", "--gpu", "a100-80g,h100-sxm,l40s,rtx-4090", "--target-qps", "10",
                   "--price-per-gpu-hour", "1.8,3,1,0.4")  # fmt: skip
    rows = doc["compare"]
    assert [r["gpu"] for r in rows] == ["A100-80G-SXM", "H100-SXM", "L40S", "RTX-4090"]
    assert all(r["fits"] and r["gpus_needed"] >= 1 and r["usd_per_mtok_at_knee"] > 0 for r in rows)
    h100 = run_json("--model", "llama-3.1-8b", "--gpu", "h100", "--target-qps", "10", "--price-per-gpu-hour", "3")
    assert rows[1]["predicted_knee"] == h100["predicted_knee"]
    assert rows[1]["usd_per_mtok_at_knee"] == h100["usd_per_mtok_at_knee"]


def test_compare_picks_a_tensor_parallel_degree_or_says_it_does_not_fit() -> None:
    doc = run_json("--model", "llama-3.1-70b", "--gpu", "h100,orin", "--target-qps", "5")
    h100, orin = doc["compare"]
    assert h100["fits"] and h100["tp"] > 1 and h100["note"] == f"needs tp {h100['tp']}"
    assert not orin["fits"] and "short by" in orin["note"]


def test_edge_mode_output() -> None:
    result = run("--model", "llama-3.1-8b", "--gpu", "jetson-agx-orin-64gb", "--dtype", "q4_k_m",
                 "--slo", "tok_s_per_user=10")  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("unified memory", "6 GiB OS reserve", "Quantization", "q8_0", "q4_k_m", "llama-server", "--parallel",
                 "--threads", "--batch-size", "-c"):  # fmt: skip
        assert text in out, text
    doc = run_json("--model", "llama-3.1-8b", "--gpu", "orin", "--dtype", "q4_k_m", "--slo", "tok_s_per_user=10")
    assert doc["edge"]["users_at_target"] >= 1
    assert {f["flag"] for f in doc["edge"]["llama_cpp_flags"]} == {
        "-ngl",
        "--parallel",
        "-c",
        "--threads",
        "--batch-size",
    }


def test_simulate_shows_the_simulators_knee_beside_the_prediction() -> None:
    doc = run_json("--model", "llama-3.1-8b", "--gpu", "h100", "--input-len", "256", "--output-len", "64",
                   "--simulate")  # fmt: skip
    sim = doc["simulation"]
    assert sim is not None and sim["simulated_knee"] is not None
    assert sim["levels"][0] == 1 and doc["predicted_knee"] in sim["levels"]
    result = run("--model", "llama-3.1-8b", "--gpu", "h100", "--input-len", "256", "--output-len", "64", "--simulate")
    assert "Simulated knee:" in result.stdout and "beside predicted" in result.stdout


def _fails(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_model_that_does_not_fit_exits_with_shortfall_and_options() -> None:
    line = _fails("--model", "llama-3.1-70b", "--gpu", "h100")
    assert "short by 62.59 GiB" in line
    assert "--dtype fp8" in line and "--tp 2" in line
    result = run("--model", "llama-3.1-70b", "--gpu", "h100", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["fits"] is False and doc["shortfall_gib"] == pytest.approx(62.5857, abs=1e-3)


def test_context_that_does_not_fit_suggests_a_shorter_one() -> None:
    line = _fails("--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--input-len", "100000", "--output-len", "1000")
    assert "a shorter context: prompt + output <=" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--model", "llama-9b", "--gpu", "h100"), "closest known: Llama-2-7B"),
        (("--model", "llama-3.1-8b", "--gpu", "h1000"), "closest known: H200, H100-SXM"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--efficiency", "1.5"), "(0, 1]"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--efficiency", "0"), "(0, 1]"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--input-len", "normal:-5,3"), "bad length"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--output-len", "uniform:-10,20"), "bad length"),
        (("--model", "llama-2-7b", "--gpu", "h100", "--input-len", "4000", "--output-len", "200"), "maximum context"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--slo", "ttft=fast"), "cannot read SLO term"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "3"), "valid: [1, 2, 4, 8]"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--target-qps", "-1"), "--target-qps must be > 0"),
        (("--model", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-utilization", "1.5"), "(0, 1]"),
        (("--model", "llama-3.1-8b", "--gpu", "h100,l40s", "--simulate"), "single --gpu"),
        (("--model", "llama-3.1-8b", "--gpu", "h100,l40s", "--price-per-gpu-hour", "1,2,3"), "3 prices for 2 cards"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args: tuple[str, ...], needle: str) -> None:
    assert needle in _fails(*args)
