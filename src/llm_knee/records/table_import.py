"""Import a table of per-level figures someone already has (CSV), so `knee analyze` can judge it.

Required columns: ``concurrency``, ``throughput`` (output tokens/s), ``ttft_p99`` (ms).
Optional: ``ttft_p50``, ``e2e_p50``, ``e2e_p99`` (ms), ``error_rate`` (fraction 0–1).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from llm_knee.analysis.summary import LevelSummary
from llm_knee.records.schema import ERROR_CLASSES

REQUIRED = ("concurrency", "throughput", "ttft_p99")
OPTIONAL = ("ttft_p50", "e2e_p50", "e2e_p99", "error_rate")


class TableError(ValueError):
    """The CSV table cannot be analysed; the message says which row/column and what to fix."""


def _number(raw: str | None, *, row: int, col: str, path: Path, required: bool) -> float | None:
    if raw is None or raw.strip() == "":
        if required:
            raise TableError(f"{path}: row {row}: column {col!r} is empty; every row needs a number there")
        return None
    try:
        value = float(raw)
    except ValueError:
        raise TableError(f"{path}: row {row}: column {col!r} holds {raw!r}, which is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TableError(f"{path}: row {row}: column {col!r} must be a finite number >= 0, got {raw!r}")
    return value


def read_level_table(path: Path) -> list[LevelSummary]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TableError(f"cannot read {path}: {exc}") from exc
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TableError(
            f"{path}: missing column(s) {', '.join(missing)}; found {', '.join(header) or 'no header'}. "
            f"Required: {', '.join(REQUIRED)}; optional: {', '.join(OPTIONAL)}"
        )
    out: list[LevelSummary] = []
    last = -math.inf
    for i, raw_row in enumerate(reader, start=2):
        row = {k.strip(): v for k, v in raw_row.items() if k is not None}
        conc = _number(row.get("concurrency"), row=i, col="concurrency", path=path, required=True)
        assert conc is not None
        if conc <= last:
            raise TableError(
                f"{path}: row {i}: concurrency {conc:g} is not above the previous row's {last:g}; "
                "sort the rows by concurrency and remove duplicates"
            )
        if conc <= 0:
            raise TableError(f"{path}: row {i}: concurrency must be positive, got {conc:g}")
        last = conc
        tput = _number(row.get("throughput"), row=i, col="throughput", path=path, required=True)
        vals = {c: _number(row.get(c), row=i, col=c, path=path, required=False) for c in (*REQUIRED[2:], *OPTIONAL)}
        err = vals["error_rate"] or 0.0
        if err > 1:
            raise TableError(f"{path}: row {i}: error_rate is a fraction (0–1), got {err:g}")
        assert tput is not None
        out.append(
            LevelSummary(
                level_index=len(out), level=conc, mode="closed", window_s=0.0, requests=0, ok=1,
                errors={c.value: 0 for c in ERROR_CLASSES}, error_rate=err, req_s=0.0, output_tok_s=tput,
                prefill_tok_s=0.0, total_tok_s=tput, ttft_mean_ms=None, ttft_p50_ms=vals["ttft_p50"],
                ttft_p90_ms=None, ttft_p95_ms=None, ttft_p99_ms=vals["ttft_p99"], tpot_p50_ms=None,
                tpot_p99_ms=None, itl_p50_ms=None, itl_p99_ms=None, e2e_p50_ms=vals["e2e_p50"],
                e2e_p99_ms=vals["e2e_p99"], decode_tok_s_per_user_p50=None, decode_tok_s_per_user_p10=None,
                queue_p50_ms=None, queue_p99_ms=None, mean_input_tokens=None, mean_output_tokens=None,
                retries=0,
            )
        )  # fmt: skip
    if len(out) < 2:
        raise TableError(f"{path}: needs at least 2 data rows to look for a knee, found {len(out)}")
    return out
