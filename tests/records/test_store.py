"""The run directory keeps every record across crashes and can be read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_knee.records.schema import ErrorClass, RequestRecord, TelemetrySample
from llm_knee.records.store import RunStore, RunStoreError
from llm_knee.records.table_import import TableError, read_level_table


def test_records_round_trip_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, {"load": {"levels": [1]}}, "t")
    a = store.new_session()
    assert a.session == 0 and store.new_session().session == 1
    r = RequestRecord("x", 0, 1.0, itl_ns=[1, 2], error=ErrorClass.RESET, error_detail="peer closed")
    store.append_record(r)
    store.append_telemetry(TelemetrySample(5, "host", "cpu", 0.5, {"core": "0"}))
    with (store.path / "records.jsonl").open("ab") as fh:
        fh.write(b'{"request_id": "half')  # the process died mid-write
    again = RunStore.open(store.path)
    assert again.records() == [r]
    assert again.skipped_lines == 1
    assert again.telemetry()[0].labels == {"core": "0"}
    assert len(again.read_spec()["sessions"]) == 2


def test_later_level_entries_replace_earlier_ones(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, {})
    store.append_level({"level_index": 0, "status": "interrupted"})
    store.append_level({"level_index": 1, "status": "complete"})
    store.append_level({"level_index": 0, "status": "complete"})
    assert [e["status"] for e in store.levels()] == ["complete", "complete"]


def test_two_runs_in_the_same_second_get_their_own_directories(tmp_path: Path) -> None:
    assert RunStore.create(tmp_path, {}).path != RunStore.create(tmp_path, {}).path


def test_opening_something_that_is_not_a_run_says_so(tmp_path: Path) -> None:
    with pytest.raises(RunStoreError, match="not a directory"):
        RunStore.open(tmp_path / "nope")
    with pytest.raises(RunStoreError, match="not an llm-knee run directory"):
        RunStore.open(tmp_path)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


def test_csv_table_reads_required_and_optional_columns(tmp_path: Path) -> None:
    rows = read_level_table(write(tmp_path, "concurrency,throughput,ttft_p99,error_rate\n1,100,50,\n2,190,55,0.01\n"))
    assert [r.level for r in rows] == [1, 2] and rows[1].error_rate == 0.01 and rows[0].error_rate == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("concurrency,throughput\n1,2\n2,3\n", "missing column"),
        ("concurrency,throughput,ttft_p99\n2,1,1\n1,2,2\n", "not above the previous"),
        ("concurrency,throughput,ttft_p99\n1,abc,1\n2,2,2\n", "not a number"),
        ("concurrency,throughput,ttft_p99\n1,1,1\n", "at least 2"),
        ("concurrency,throughput,ttft_p99,error_rate\n1,1,1,5\n2,2,2,0\n", "fraction"),
        ("concurrency,throughput,ttft_p99\n1,,1\n2,2,2\n", "empty"),
    ],
)
def test_bad_tables_name_the_row_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TableError, match=message):
        read_level_table(write(tmp_path, text))
