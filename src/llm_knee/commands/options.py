"""Parsing of compact command-line values shared by several commands."""

from __future__ import annotations


def parse_levels(text: str) -> tuple[float, ...]:
    """``"1,2,4,8"`` → (1, 2, 4, 8). Clear errors for empty, non-numeric or unsorted lists."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("no levels given: use e.g. --levels 1,2,4,8,16")
    out: list[float] = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            raise ValueError(f"level {p!r} is not a number (use e.g. --levels 1,2,4,8,16)") from None
        if v <= 0:
            raise ValueError(f"levels must be positive, got {p}")
        out.append(v)
    if out != sorted(set(out)):
        raise ValueError(f"levels must be strictly increasing without repeats, got {text}")
    return tuple(out)
