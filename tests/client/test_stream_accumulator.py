"""How one streamed answer fills its RequestRecord: tokens, gaps, usage and the outcome class."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from llm_knee.client.stream import StreamAccumulator
from llm_knee.records.schema import ErrorClass, RequestRecord


def ticking_clock(start: int = 1_000, step: int = 10) -> Callable[[], int]:
    """A clock that advances ``step`` ns per reading, so every timestamp is predictable."""
    now = start - step

    def clock() -> int:
        nonlocal now
        now += step
        return now

    return clock


def sse(*objs: Any) -> bytes:
    out = b""
    for obj in objs:
        out += b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"
    return out


def text(t: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": t}]}


def delta(**d: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d}]}


def usage(completion: int, prompt: int = 5) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def run(api: str, stream: bytes, requested: int, chunks: Iterable[bytes] | None = None) -> RequestRecord:
    record = RequestRecord("r", 0, 1.0, output_tokens_requested=requested)
    acc = StreamAccumulator(record, api, anchor_ns=1_000, clock=ticking_clock())
    for part in chunks if chunks is not None else [stream]:
        acc.feed(part)
        if acc.failed:
            break
    acc.finish()
    return record


def test_completions_stream_counts_tokens_times_gaps_and_usage() -> None:
    rec = run("completions", sse(text("a"), text("b"), text("c"), usage(3, prompt=7), b"[DONE]"), 3)
    assert rec.ok
    assert rec.output_chunks == 3
    assert rec.output_tokens_server == 3 and rec.prompt_tokens_server == 7
    assert (rec.first_token_ns, rec.last_token_ns) == (0, 20)
    assert rec.itl_ns == [10, 10]


def test_chat_role_only_delta_and_usage_chunk_count_no_token() -> None:
    stream = sse(delta(role="assistant", content=""), delta(content="x"), delta(content="y"), usage(2), b"[DONE]")
    rec = run("chat", stream, 2)
    assert rec.ok
    assert rec.output_chunks == 2
    assert len(rec.itl_ns) == rec.output_chunks - 1


def test_chat_reasoning_content_counts_as_output() -> None:
    rec = run("chat", sse(delta(reasoning_content="think"), delta(content="answer"), b"[DONE]"), 2)
    assert rec.ok and rec.output_chunks == 2


def test_a_chunk_with_several_choices_is_one_timestamped_chunk() -> None:
    two = {"choices": [{"index": 0, "text": "a"}, {"index": 1, "text": "b"}]}
    rec = run("completions", sse(two, b"[DONE]"), 1)
    assert rec.ok and rec.output_chunks == 1 and rec.itl_ns == []


def test_fewer_tokens_by_usage_is_incomplete_even_with_done() -> None:
    rec = run("completions", sse(text("a"), text("b"), usage(2), b"[DONE]"), 4)
    assert rec.error is ErrorClass.INCOMPLETE
    assert rec.error_detail == "2 of 4 output tokens (usage.completion_tokens)"


def test_usage_is_trusted_over_the_chunk_count() -> None:
    # Servers may merge several tokens into one chunk; usage says how many were generated.
    rec = run("completions", sse(text("ab"), usage(2), b"[DONE]"), 2)
    assert rec.ok and rec.output_tokens == 2 and rec.output_chunks == 1


def test_without_usage_the_chunk_count_decides() -> None:
    rec = run("completions", sse(text("a"), b"[DONE]"), 2)
    assert rec.error is ErrorClass.INCOMPLETE
    assert "1 of 2 output tokens (content chunks counted, no usage)" in rec.error_detail


def test_stream_ending_early_without_done_says_so() -> None:
    rec = run("completions", sse(text("a")), 3)
    assert rec.error is ErrorClass.INCOMPLETE
    assert rec.error_detail.endswith("stream ended without [DONE]")


def test_complete_stream_without_done_is_still_a_success() -> None:
    rec = run("completions", sse(text("a"), text("b")), 2)
    assert rec.ok


def test_empty_choices_only_is_incomplete_whatever_usage_claims() -> None:
    rec = run("chat", sse({"choices": []}, {"choices": []}, usage(8), b"[DONE]"), 8)
    assert rec.error is ErrorClass.INCOMPLETE
    assert "no output content" in rec.error_detail


def test_error_object_with_4xx_code_is_http_4xx_and_keeps_the_message() -> None:
    err = {"error": {"message": "prompt too long", "type": "invalid_request_error", "code": 400}}
    rec = run("completions", sse(text("a"), err, b"[DONE]"), 4)
    assert rec.error is ErrorClass.HTTP_4XX
    assert rec.error_detail == "200 carrying error object: code 400: prompt too long"


def test_error_object_with_string_5xx_code_is_http_5xx() -> None:
    rec = run("completions", sse({"error": {"message": "engine died", "code": "503"}}), 4)
    assert rec.error is ErrorClass.HTTP_5XX and "engine died" in rec.error_detail


def test_error_object_without_code_is_classed_by_its_type() -> None:
    client = run("chat", sse({"error": {"message": "bad", "type": "BadRequestError"}}), 1)
    server = run("chat", sse({"error": {"message": "boom", "type": "InternalServerError"}}), 1)
    plain = run("chat", sse({"error": "just a string"}), 1)
    assert client.error is ErrorClass.HTTP_4XX
    assert server.error is ErrorClass.HTTP_5XX
    assert plain.error is ErrorClass.HTTP_5XX and "just a string" in plain.error_detail


def test_top_level_error_envelope_is_recognised() -> None:
    rec = run("completions", sse({"object": "error", "message": "model not found", "code": 404}), 1)
    assert rec.error is ErrorClass.HTTP_4XX and "model not found" in rec.error_detail


def test_non_json_data_line_is_malformed_and_stops_reading() -> None:
    rec = run("completions", sse(text("a")) + b"data: {oops\n\n" + sse(text("b"), b"[DONE]"), 2)
    assert rec.error is ErrorClass.MALFORMED
    assert rec.error_detail == "non-JSON data line: {oops"
    assert rec.output_chunks == 1


def test_invalid_utf8_is_malformed_and_named_as_such() -> None:
    rec = run("completions", b'data: {"choices":[{"text":"\xff"}]}\n\n', 1)
    assert rec.error is ErrorClass.MALFORMED and rec.error_detail.startswith("invalid UTF-8 in data line")


def test_json_that_is_not_an_object_or_has_bad_choices_is_malformed() -> None:
    assert run("completions", sse([1, 2]), 1).error is ErrorClass.MALFORMED
    assert run("completions", sse({"choices": {"text": "a"}}), 1).error is ErrorClass.MALFORMED


def test_data_after_done_is_ignored() -> None:
    rec = run("completions", sse(text("a"), b"[DONE]", b"{garbage"), 1)
    assert rec.ok and rec.output_chunks == 1


def test_long_detail_is_truncated_to_500_characters() -> None:
    rec = run("completions", sse({"error": {"message": "x" * 5000, "code": 500}}), 1)
    assert len(rec.error_detail) == 500 and rec.error_detail.endswith("…")


def test_events_split_across_network_chunks_are_counted_once() -> None:
    stream = sse(text("a"), text("b"), b"[DONE]")
    rec = run("completions", stream, 2, chunks=[stream[i : i + 7] for i in range(0, len(stream), 7)])
    assert rec.ok and rec.output_chunks == 2


@dataclass
class Counter:
    tokens: int = 0


def test_token_counter_is_bumped_per_content_chunk() -> None:
    counter = Counter()
    record = RequestRecord("r", 0, 1.0, output_tokens_requested=2)
    acc = StreamAccumulator(record, "chat", 0, counter=counter)
    acc.feed(sse(delta(role="assistant"), delta(content="a"), delta(content="b"), usage(2), b"[DONE]"))
    assert counter.tokens == 2
