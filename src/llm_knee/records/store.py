"""The run directory: an append-only store that survives interruption.

Layout of ``<base>/<YYYYmmdd-HHMMSS>[-label]/``:
- ``spec.json``       what was asked (workload, target, load settings) and one clock anchor per session
- ``records.jsonl``   one RequestRecord per line, appended (and flushed to the OS) before it is counted
- ``telemetry.jsonl`` TelemetrySamples, appended the same way
- ``levels.jsonl``    one line per finished level: its window, status and summary — the resume state
- ``result.json``, ``levels.csv``, ``report.md``  written by the reports, always re-creatable from the above

A crash can at worst leave a half-written last line; readers skip it and say so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from llm_knee.records.schema import RECORD_SCHEMA_VERSION, RequestRecord, TelemetrySample

SPEC_FILE = "spec.json"
RECORDS_FILE = "records.jsonl"
TELEMETRY_FILE = "telemetry.jsonl"
LEVELS_FILE = "levels.jsonl"


class RunStoreError(RuntimeError):
    """The run directory is missing, unreadable or not a run directory."""


@dataclass(frozen=True)
class SessionAnchor:
    session: int
    perf_ns: int  # time.perf_counter_ns() at the anchor: record times are relative to this
    wall_ns: int  # time.time_ns() at the same instant, to place the session on the calendar


def _dump(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Objects of a JSONL file and the number of unreadable lines (a torn last line after a crash)."""
    if not path.exists():
        return [], 0
    out: list[dict[str, Any]] = []
    bad = 0
    with path.open("rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                bad += 1
    return out, bad


class RunStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: IO[bytes] | None = None
        self._telemetry: IO[bytes] | None = None
        self.skipped_lines = 0

    # --- creation and opening ---
    @classmethod
    def create(cls, base: Path, spec: dict[str, Any], label: str = "") -> RunStore:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        name = f"{stamp}-{label}" if label else stamp
        base.mkdir(parents=True, exist_ok=True)
        path = base / name
        n = 1
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                n += 1
                path = base / f"{name}-{n}"
        store = cls(path)
        store.write_spec({"schema_version": RECORD_SCHEMA_VERSION, "sessions": [], **spec})
        return store

    @classmethod
    def open(cls, path: Path) -> RunStore:
        if not path.is_dir():
            raise RunStoreError(f"{path} is not a directory; give the run directory that `knee find` created")
        if not (path / SPEC_FILE).exists():
            raise RunStoreError(f"{path} has no {SPEC_FILE}: it is not an llm-knee run directory")
        return cls(path)

    # --- spec and sessions ---
    def read_spec(self) -> dict[str, Any]:
        try:
            data = orjson.loads((self.path / SPEC_FILE).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise RunStoreError(f"cannot read {self.path / SPEC_FILE}: {exc}") from exc
        if not isinstance(data, dict):
            raise RunStoreError(f"{self.path / SPEC_FILE} does not hold a JSON object")
        return data

    def write_spec(self, spec: dict[str, Any]) -> None:
        tmp = self.path / (SPEC_FILE + ".tmp")
        tmp.write_bytes(orjson.dumps(spec, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        os.replace(tmp, self.path / SPEC_FILE)

    def new_session(self) -> SessionAnchor:
        spec = self.read_spec()
        sessions = spec.setdefault("sessions", [])
        anchor = SessionAnchor(len(sessions), time.perf_counter_ns(), time.time_ns())
        sessions.append({"session": anchor.session, "perf_ns": anchor.perf_ns, "wall_ns": anchor.wall_ns})
        self.write_spec(spec)
        return anchor

    # --- appends ---
    def append_record(self, record: RequestRecord) -> None:
        if self._records is None:
            self._records = (self.path / RECORDS_FILE).open("ab")
        self._records.write(_dump(record) + b"\n")
        # Flushed to the OS at once: a killed process loses no completed record.
        self._records.flush()

    def append_telemetry(self, sample: TelemetrySample) -> None:
        if self._telemetry is None:
            self._telemetry = (self.path / TELEMETRY_FILE).open("ab")
        self._telemetry.write(_dump(sample) + b"\n")
        self._telemetry.flush()

    def append_level(self, entry: dict[str, Any]) -> None:
        with (self.path / LEVELS_FILE).open("ab") as fh:
            fh.write(_dump(entry) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())

    def sync(self) -> None:
        for fh in (self._records, self._telemetry):
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())

    def close(self) -> None:
        for fh in (self._records, self._telemetry):
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
        self._records = self._telemetry = None

    # --- reads ---
    def records(self) -> list[RequestRecord]:
        rows, bad = _read_jsonl(self.path / RECORDS_FILE)
        self.skipped_lines += bad
        return [RequestRecord.from_dict(r) for r in rows]

    def telemetry(self) -> list[TelemetrySample]:
        rows, bad = _read_jsonl(self.path / TELEMETRY_FILE)
        self.skipped_lines += bad
        return [TelemetrySample.from_dict(r) for r in rows]

    def levels(self) -> list[dict[str, Any]]:
        """The latest entry per level index (a resumed level replaces the interrupted one)."""
        rows, bad = _read_jsonl(self.path / LEVELS_FILE)
        self.skipped_lines += bad
        latest: dict[int, dict[str, Any]] = {}
        for row in rows:
            latest[int(row["level_index"])] = row
        return [latest[k] for k in sorted(latest)]

    def iter_files(self) -> Iterator[Path]:
        yield from sorted(self.path.iterdir())

    def write_text(self, name: str, text: str) -> Path:
        target = self.path / name
        tmp = self.path / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
        return target

    def write_json(self, name: str, obj: Any) -> Path:
        target = self.path / name
        tmp = self.path / (name + ".tmp")
        tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        os.replace(tmp, target)
        return target
