"""The SSE parser turns any split of a byte stream into the same events."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_knee.client.sse import DONE, SSEError, SSEParser


def parse_whole(data: bytes) -> list[bytes]:
    parser = SSEParser()
    return parser.feed(data) + parser.flush()


def parse_split(data: bytes, cuts: list[int]) -> list[bytes]:
    parser = SSEParser()
    events: list[bytes] = []
    start = 0
    for cut in sorted(set(cuts)):
        events += parser.feed(data[start:cut])
        start = cut
    events += parser.feed(data[start:])
    return events + parser.flush()


OPENAI_STREAM = (
    b'data: {"choices":[{"text":"a"}]}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"text":"b"}]}\r\n\r\n'
    b'data:{"choices":[],"usage":{"completion_tokens":2}}\r\r'
    b"data: [DONE]\n\n"
)


def test_openai_stream_yields_one_payload_per_event_and_done_last() -> None:
    assert parse_whole(OPENAI_STREAM) == [
        b'{"choices":[{"text":"a"}]}',
        b'{"choices":[{"text":"b"}]}',
        b'{"choices":[],"usage":{"completion_tokens":2}}',
        DONE,
    ]


def test_every_byte_split_gives_the_same_events() -> None:
    whole = parse_whole(OPENAI_STREAM)
    for cut in range(len(OPENAI_STREAM) + 1):
        assert parse_split(OPENAI_STREAM, [cut]) == whole, cut


@given(st.lists(st.integers(min_value=0, max_value=len(OPENAI_STREAM)), max_size=12))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    assert parse_split(OPENAI_STREAM, cuts) == parse_whole(OPENAI_STREAM)


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    # The LF after a CR at a chunk edge must not count as a blank line (which would end the event).
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\ndata: b\r\n\r\n") == [b"a\nb"]


def test_data_lines_of_one_event_are_joined_with_lf() -> None:
    assert parse_whole(b"data: line one\ndata: line two\n\n") == [b"line one\nline two"]


def test_comments_other_fields_and_lone_blank_lines_give_nothing() -> None:
    assert parse_whole(b": ping\n\nevent: message\nid: 7\nretry: 10\n\n\n\n") == []


def test_event_field_does_not_hide_the_data() -> None:
    assert parse_whole(b"event: error\ndata: {}\n\n") == [b"{}"]


def test_only_one_leading_space_is_removed() -> None:
    assert parse_whole(b"data:  two spaces\n\n") == [b" two spaces"]


def test_leading_utf8_bom_is_ignored_even_when_split() -> None:
    parser = SSEParser()
    events = parser.feed(b"\xef\xbb") + parser.feed(b"\xbfdata: x\n\n")
    assert events == [b"x"]


def test_unterminated_last_event_comes_out_on_flush() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: [DONE]") == []
    assert parser.flush() == [DONE]
    assert parser.flush() == []


def test_bytes_are_passed_through_undecoded() -> None:
    # Invalid UTF-8 is the JSON layer's business: the parser must neither fail nor alter it.
    assert parse_whole(b'data: {"t":"\xff"}\n\n') == [b'{"t":"\xff"}']


def test_long_line_in_small_pieces_is_reassembled() -> None:
    payload = b"x" * 300_000
    data = b"data: " + payload + b"\n\n"
    cuts = list(range(0, len(data), 4096))
    assert parse_split(data, cuts) == [payload]


def test_line_over_the_limit_is_an_error() -> None:
    parser = SSEParser(max_line_bytes=1000)
    parser.feed(b"data: " + b"x" * 900)
    with pytest.raises(SSEError, match="longer than 1000 bytes"):
        parser.feed(b"x" * 200)


def test_fields_that_merely_start_with_data_are_not_data() -> None:
    assert parse_whole(b"database: x\n\ndata\n\n") == [b""]


def test_whole_single_event_chunks_give_the_same_events_as_byte_by_byte_feeding() -> None:
    chunks = [b'data: {"a":1}\n\n', b"data: \n\n", b"data: x\n\n", b"data: [DONE]\n\n"]
    fast = SSEParser()
    slow = SSEParser()
    fast_events = [event for chunk in chunks for event in fast.feed(chunk)]
    stream = b"".join(chunks)
    slow_events = [event for i in range(len(stream)) for event in slow.feed(stream[i : i + 1])]
    assert fast_events == slow_events == [b'{"a":1}', b"", b"x", DONE]
