"""Files rendered from a result document: result.json, levels.csv, report.md."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from llm_knee.records.store import RunStore
from llm_knee.report.telemetry_view import telemetry_rows

CSV_COLUMNS = (
    "level", "requests", "ok", "error_rate", "req_s", "output_tok_s", "prefill_tok_s", "total_tok_s",
    "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p95_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
    "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "decode_tok_s_per_user_p50",
    "decode_tok_s_per_user_p10", "queue_p50_ms", "queue_p99_ms", "goodput_req_s", "slo_met", "retries",
    "prompt_cache_hit_rate", "window_s", "steady", "stop_reason", "drain_s",
)  # fmt: skip


def levels_csv(result: dict[str, Any]) -> str:
    buf = io.StringIO()
    mode = result.get("mode", "closed")
    first = "concurrency" if mode == "closed" else "rate"
    writer = csv.writer(buf, lineterminator="\n")
    error_classes = sorted({k for lv in result["levels"] for k in lv.get("errors", {})})
    # Column names match what `knee analyze` reads back from a CSV.
    tel_names, tel_rows = telemetry_rows(result["levels"])
    tel_cols = ["tel_" + "".join(ch if ch.isalnum() else "_" for ch in n.lower()).strip("_") for n in tel_names]
    writer.writerow(
        [first, "throughput", "ttft_p99", *CSV_COLUMNS[1:], *(f"errors_{c}" for c in error_classes), *tel_cols]
    )
    for lv, tel in zip(result["levels"], tel_rows, strict=True):
        row: list[Any] = [lv["level"], lv["output_tok_s"], lv["ttft_p99_ms"]]
        row += [lv.get(c) for c in CSV_COLUMNS[1:]]
        row += [lv.get("errors", {}).get(c, 0) for c in error_classes]
        row += tel
        writer.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in row])
    return buf.getvalue()


def _f(v: Any, fmt: str = ".1f") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return format(v, fmt)
    return str(v)


def report_md(result: dict[str, Any]) -> str:
    a = result["analysis"]
    mode = result.get("mode", "closed")
    unit = "concurrency" if mode == "closed" else "rate (req/s)"
    lines = ["# llm-knee report", ""]
    if result.get("partial"):
        lines += [
            "> **Partial result**: the run was interrupted; figures cover the completed levels only.",
            "",
        ]
    lines += ["## Recommendation", "", a["sentence"], ""]
    target = result.get("target") or {}
    wl = result.get("workload") or {}
    if target or wl:
        lines += ["## Setup", ""]
        for k, v in {
            **{f"target.{k}": v for k, v in target.items()},
            **{f"workload.{k}": v for k, v in wl.items()},
        }.items():
            lines.append(f"- `{k}`: {v}")
        lines.append("")
    lines += [
        "## Levels",
        "",
        f"| {unit} | out tok/s | req/s | TTFT P50 ms | TTFT P99 ms | TPOT P50 ms | E2E P99 ms | tok/s/user | errors "
        "| retries |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in result["levels"]:
        lines.append(
            f"| {lv['level']:g} | {_f(lv['output_tok_s'])} | {_f(lv['req_s'], '.2f')} | {_f(lv['ttft_p50_ms'])} "
            f"| {_f(lv['ttft_p99_ms'])} | {_f(lv['tpot_p50_ms'])} | {_f(lv['e2e_p99_ms'])} "
            f"| {_f(lv['decode_tok_s_per_user_p50'])} | {lv['error_rate']:.1%} | {lv.get('retries', 0)} |"
        )
    tel_names, tel_rows = telemetry_rows(result["levels"])
    if tel_names:
        lines += ["", "## Telemetry per level", "", f"| {unit} | " + " | ".join(tel_names) + " |",
                  "|---" * (len(tel_names) + 1) + "|"]  # fmt: skip
        for lv, tel in zip(result["levels"], tel_rows, strict=True):
            lines.append(f"| {lv['level']:g} | " + " | ".join(_f(v) for v in tel) + " |")
    lines += ["", "## Knees", ""]
    for kind in ("throughput", "latency"):
        k = a["knees"][kind]
        if k is None:
            lines.append(f"- **{kind}**: not measured")
            continue
        where = f"{k['level']:g}" if k["reached"] else "not reached in the tested range"
        lines.append(f"- **{kind} knee**: {where} (confidence {k['confidence_label']}, {k['confidence']:.2f})")
        for m in k["methods"]:
            lv = "none" if m["level"] is None else f"{m['level']:g}"
            lines.append(f"  - {m['method']}: {lv}{' — ' + m['note'] if m['note'] else ''}")
    lines += ["", "## Alarms", ""]
    if not a["alarms"]:
        lines.append("None fired.")
    for al in a["alarms"]:
        lines.append(f"- `{al['name']}` from {al['level']:g}: {al['message']}")
    if result.get("verdicts"):
        lines += ["", "## Verdicts from telemetry", ""]
        for v in result["verdicts"]:
            lines.append(f"- `{v['name']}` at {v['level']:g} ({v['severity']}): {v['evidence']}")
    if result.get("telemetry_sources"):
        lines += ["", "Telemetry sources: " + ", ".join(result["telemetry_sources"]) + "."]
    if result.get("final_drain_s") is not None:
        lines += ["", f"Drain after the last level: {result['final_drain_s']:.2f} s."]
    for note in result.get("notes", []):
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def write_reports(store: RunStore, result: dict[str, Any]) -> list[Path]:
    return [
        store.write_json("result.json", result),
        store.write_text("levels.csv", levels_csv(result)),
        store.write_text("report.md", report_md(result)),
    ]
