"""`knee find --launch`: start the engine for each point of a grid of server knobs, sweep it, stop it, compare.

The command template is any engine's command line with ``{placeholders}``: every ``--grid`` key, every
``--set`` key, and ``{port}`` / ``{host}`` which llm-knee fills itself (a free loopback port per point).
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.table import Table

from llm_knee.client.config import ClientConfig
from llm_knee.engines.process import ServerProcess, free_port

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
RESERVED = ("port", "host")


def parse_assignments(items: list[str], what: str) -> dict[str, list[str]]:
    """``["slots=4,8", "ctx=2048"]`` → ``{"slots": ["4", "8"], "ctx": ["2048"]}``."""
    out: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE[,VALUE...], e.g. {what} slots=4,8,16")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"{what} {item!r}: the key must be a name (letters, digits, _)")
        if key in RESERVED:
            raise ValueError(f"{what} {item!r}: {{{key}}} is filled by llm-knee itself")
        if key in out:
            raise ValueError(f"{what}: {key} given twice")
        out[key] = [v.strip() for v in values.split(",") if v.strip()]
    return out


def grid_points(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    if not grid:
        return [{}]
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def render_command(template: str, values: dict[str, str]) -> list[str]:
    """Split like a shell, then fill each placeholder; an unknown placeholder is an error naming it."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise ValueError(f"--launch template cannot be split like a shell command: {exc}") from None
    if not argv:
        raise ValueError("--launch template is empty")

    def fill(token: str) -> str:
        def sub(m: re.Match[str]) -> str:
            if m[1] not in values:
                known = ", ".join(sorted(values))
                raise ValueError(
                    f"--launch template uses {{{m[1]}}} but nothing sets it; known: {known} "
                    f"(add --grid {m[1]}=... or --set {m[1]}=...)"
                )
            return values[m[1]]

        return _PLACEHOLDER.sub(sub, token)

    return [fill(t) for t in argv]


def check_template(template: str, grid: dict[str, list[str]], sets: dict[str, list[str]]) -> None:
    used = set(_PLACEHOLDER.findall(template))
    if "port" not in used:
        raise ValueError("--launch template must contain {port} so that llm-knee can give each engine a free port")
    unused = [k for k in grid if k not in used]
    if unused:
        raise ValueError(f"--grid key(s) {', '.join(unused)} do not appear in the --launch template")
    values = {k: v[0] for k, v in {**grid, **sets}.items()} | {"port": "0", "host": "127.0.0.1"}
    render_command(template, values)


@dataclass
class PointOutcome:
    values: dict[str, str]
    run_dir: Path | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values.items()) or "default"

    def peak_tok_s(self) -> float | None:
        if self.result is None or not self.result["levels"]:
            return None
        return max(float(lv["output_tok_s"]) for lv in self.result["levels"])

    def tok_s_at_recommendation(self) -> float | None:
        if self.result is None:
            return None
        rec = self.result["analysis"].get("recommended_concurrency") or self.result["analysis"].get("recommended_rate")
        return next((float(lv["output_tok_s"]) for lv in self.result["levels"] if lv["level"] == rec), None)

    def to_dict(self) -> dict[str, Any]:
        a = self.result["analysis"] if self.result else {}
        return {
            "values": self.values, "run_dir": str(self.run_dir) if self.run_dir else None, "error": self.error,
            "throughput_knee": a.get("throughput_knee"), "latency_knee": a.get("latency_knee"),
            "recommended_concurrency": a.get("recommended_concurrency"), "peak_tok_s": self.peak_tok_s(),
            "tok_s_at_recommendation": self.tok_s_at_recommendation(),
        }  # fmt: skip


def best_point(outcomes: list[PointOutcome]) -> PointOutcome | None:
    """The point giving the most output tokens/s at its own recommended (safe-to-run) load."""
    scored = [(o.tok_s_at_recommendation(), o) for o in outcomes]
    ok = [(s, o) for s, o in scored if s is not None]
    return max(ok, key=lambda so: so[0])[1] if ok else None


def comparison_table(outcomes: list[PointOutcome]) -> Table:
    best = best_point(outcomes)
    t = Table(title="Engine grid", header_style="bold")
    for col in ("point", "tput knee", "lat knee", "recommended", "tok/s there", "peak tok/s", "status"):
        t.add_column(col, justify="left" if col in ("point", "status") else "right")
    for o in outcomes:
        d = o.to_dict()

        def n(v: Any, fmt: str = "g") -> str:
            return "–" if v is None else format(v, fmt)

        t.add_row(
            o.label, n(d["throughput_knee"]), n(d["latency_knee"]), n(d["recommended_concurrency"]),
            n(d["tok_s_at_recommendation"], ".0f"), n(d["peak_tok_s"], ".0f"),
            "best" if o is best else ("failed: " + (o.error or "").splitlines()[0] if o.error else "ok"),
            style="bold green" if o is best else "",
        )  # fmt: skip
    return t


def launch_point(
    template: str,
    values: dict[str, str],
    *,
    log_path: Path,
    health_path: str,
    startup_timeout_s: float,
) -> tuple[ServerProcess, str]:
    """Start one engine on a free loopback port and wait for its health; returns it and its base URL."""
    port = free_port()
    argv = render_command(template, {**values, "port": str(port), "host": "127.0.0.1"})
    base = f"http://127.0.0.1:{port}"
    proc = ServerProcess(argv, health_url=base + health_path, log_path=log_path, startup_timeout_s=startup_timeout_s)
    proc.start()
    return proc, base


def client_for(client: ClientConfig, base_url: str) -> ClientConfig:
    return replace(client, base_url=base_url)
