"""Console rendering of a result document with rich: the level table, the knees and the sentence."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from llm_knee.report.telemetry_view import telemetry_rows

# Short marks for the table's alarm column (first level where each fires, and every level after).
ALARM_MARKS = {
    "ttft_tail": "T",
    "e2e_tail": "E",
    "ttft_p99_over_target": "L",
    "ttft_p99_stop_admitting": "L!",
    "per_user_decode_slow": "S",
    "errors": "X",
    "slo_missed": "O",
}


def _n(v: Any, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)


def level_table(result: dict[str, Any]) -> Table:
    mode = result.get("mode", "closed")
    a = result["analysis"]
    # No vertical rules: the table must fit an 80-column terminal without cutting headers.
    table = Table(
        title="Levels", header_style="bold", expand=False, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0)
    )
    table.add_column("users" if mode == "closed" else "req/s in", justify="right")
    retries = any(lv.get("retries") for lv in result["levels"])
    names = ["tok/s", "req/s", "TTFT50", "TTFT99", "TPOT50", "E2E99", "t/s/u", "err%"]
    for name in [*names, *(["retry"] if retries else []), "alarm"]:
        table.add_column(name, justify="right", min_width=len(name))
    first_fire: dict[str, float] = {al["name"]: al["level"] for al in a["alarms"]}
    rec = a.get("recommended_concurrency") if mode == "closed" else a.get("recommended_rate")
    for lv in result["levels"]:
        marks = ",".join(m for name, m in ALARM_MARKS.items() if name in first_fire and lv["level"] >= first_fire[name])
        style = "bold green" if rec is not None and lv["level"] == rec else ""
        table.add_row(
            f"{lv['level']:g}",
            _n(lv["output_tok_s"], ".0f"),
            _n(lv["req_s"], ".2f"),
            _n(lv["ttft_p50_ms"], ".0f"),
            _n(lv["ttft_p99_ms"], ".0f"),
            _n(lv["tpot_p50_ms"], ".1f"),
            _n(lv["e2e_p99_ms"], ".0f"),
            _n(lv["decode_tok_s_per_user_p50"], ".1f"),
            f"{100 * lv['error_rate']:.1f}",
            *([str(lv.get("retries", 0))] if retries else []),
            marks,
            style=style,
        )
    table.caption = "times in ms (50/99 = P50/P99); t/s/u = decode tok/s per user; alarms: " + ", ".join(
        f"{m}={n}" for n, m in ALARM_MARKS.items()
    )
    return table


def telemetry_table(result: dict[str, Any]) -> Table | None:
    names, rows = telemetry_rows(result["levels"])
    if not names:
        return None
    mode = result.get("mode", "closed")
    table = Table(
        title="Telemetry per level (mean unless noted; worst GPU)",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("conc." if mode == "closed" else "req/s in", justify="right")
    for n in names:
        table.add_column(n, justify="right")
    for lv, row in zip(result["levels"], rows, strict=True):
        table.add_row(f"{lv['level']:g}", *(_n(v, ".1f") for v in row))
    return table


def knees_text(result: dict[str, Any]) -> Text:
    a = result["analysis"]
    out = Text()
    for kind in ("throughput", "latency"):
        k = a["knees"][kind]
        out.append(f"{kind.capitalize()} knee: ", style="bold")
        if k is None:
            out.append("not measured\n")
            continue
        out.append(f"{k['level']:g}" if k["reached"] else "not reached", style="cyan")
        out.append(f"  (confidence {k['confidence_label']} {k['confidence']:.2f}; ")
        out.append(
            ", ".join(f"{m['method']}={'–' if m['level'] is None else format(m['level'], 'g')}" for m in k["methods"])
        )
        out.append(")\n")
    for al in a["alarms"]:
        out.append("alarm ", style="yellow")
        out.append(f"{al['name']} from {al['level']:g}: {al['message']}\n")
    for v in result.get("verdicts", []):
        out.append("verdict ", style="red" if v["severity"] == "critical" else "magenta")
        out.append(f"{v['name']} at {v['level']:g}: {v['evidence']}\n")
    return out


def render_result(result: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    if result.get("partial"):
        parts.append(Text("Partial result: the run was interrupted.", style="bold yellow"))
    parts.append(level_table(result))
    tel = telemetry_table(result)
    if tel is not None:
        parts.append(tel)
    parts.append(knees_text(result))
    style = (
        "green"
        if result["analysis"].get("recommended_concurrency") or result["analysis"].get("recommended_rate")
        else "red"
    )
    parts.append(Panel(result["analysis"]["sentence"], title="Recommendation", border_style=style))
    for note in result.get("notes", []):
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def print_result(console: Console, result: dict[str, Any]) -> None:
    console.print(render_result(result))
