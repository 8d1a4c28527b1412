"""`knee analyze` on a CSV table someone already has."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from llm_knee.cli import app

runner = CliRunner()
TABLE = """concurrency,throughput,ttft_p99,ttft_p50,error_rate
1,100,40,30,0
2,200,41,30,0
4,400,42,31,0
8,790,45,33,0
12,800,300,120,0
16,805,700,300,0.01
24,790,1500,600,0.05
"""


def test_json_has_the_documented_keys_and_finds_the_knee(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(TABLE)
    res = runner.invoke(app, ["analyze", str(tmp_path / "t.csv"), "--json"])
    assert res.exit_code == 0, res.output
    a = orjson.loads(res.stdout)
    for key in ("throughput_knee", "latency_knee", "recommended_concurrency", "safe_concurrency", "confidence",
                "alarms"):  # fmt: skip
        assert key in a
    assert a["throughput_knee"] == 8 and a["latency_knee"] == 8 and a["recommended_concurrency"] == 8
    assert a["safe_concurrency"] == 5
    assert {"name": "errors", "level": 16.0} in [{k: al[k] for k in ("name", "level")} for al in a["alarms"]]


def test_table_output_names_the_recommendation(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(TABLE)
    res = runner.invoke(app, ["analyze", str(tmp_path / "t.csv")])
    assert res.exit_code == 0 and "Run at most 8" in " ".join(res.output.split())


def test_bad_tables_exit_2_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "missing.csv").write_text("concurrency,throughput\n1,2\n2,3\n")
    (tmp_path / "order.csv").write_text("concurrency,throughput,ttft_p99\n4,1,1\n2,2,2\n")
    for name, reason in (("missing.csv", "missing column"), ("order.csv", "not above"), ("nope.csv", "does not exist")):
        res = runner.invoke(app, ["analyze", str(tmp_path / name)])
        assert res.exit_code == 2, res.output
        assert reason in " ".join(res.output.split())
