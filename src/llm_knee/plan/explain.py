"""A planner figure with its formula and the numbers that went into it, so a reviewer can redo it by hand.

Every figure keeps its exact value (never rounded); only the text forms below round, for reading.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

GIB = 1024**3

Value = float | int | bool | str | None


@dataclass(frozen=True)
class Figure:
    """key: stable JSON name; formula: symbolic; inputs: the formula with its numbers substituted."""

    key: str
    label: str
    value: Value
    unit: str
    formula: str
    inputs: str

    def to_dict(self) -> dict[str, Value]:
        return {
            "key": self.key,
            "label": self.label,
            "value": self.value,
            "unit": self.unit,
            "formula": self.formula,
            "inputs": self.inputs,
        }


def num(x: float | int) -> str:
    """Enough digits to redo a calculation: integers exactly, floats to 7 significant digits."""
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return f"{x:.7g}"


def show(value: Value, unit: str) -> str:
    """Human text of a value in its unit (rounded for reading only)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if unit == "B":
        if abs(value) < 1024**2:
            return f"{value:,.0f} B"
        if abs(value) < GIB:
            return f"{value / 1024**2:,.2f} MiB"
        return f"{value / GIB:,.2f} GiB"
    if unit == "s":
        return f"{value * 1e3:,.2f} ms" if abs(value) < 10 else f"{value:,.2f} s"
    if isinstance(value, int):
        return f"{value:,}" + (f" {unit}" if unit else "")
    return f"{value:,.4g}" + (f" {unit}" if unit else "")


def explain_lines(figures: Iterable[Figure]) -> list[str]:
    """One block per figure: 'label = value', the formula, and the formula with its inputs."""
    lines: list[str] = []
    for f in figures:
        exact = (
            num(f.value) if isinstance(f.value, int | float) and not isinstance(f.value, bool) else show(f.value, "")
        )
        lines.append(f"{f.label} [{f.key}] = {show(f.value, f.unit)}  (value: {exact})")
        lines.append(f"    formula: {f.formula}")
        lines.append(f"    inputs:  {f.inputs}")
    return lines
