"""Incremental Server-Sent Events parser for OpenAI-style streams.

Bytes go in as the network delivers them (any split, even inside a CRLF); complete events come out as
the raw bytes of their ``data`` field, ready for ``orjson.loads``. It follows the SSE rules that matter
for these streams: lines end in LF, CRLF or CR; lines starting with ``:`` are comments (keep-alives);
a ``data:`` value loses one leading space; several ``data`` lines of one event are joined with LF; a
blank line dispatches the event; other fields (``event``, ``id``, ``retry``) are ignored. The stream's
``[DONE]`` sentinel comes out like any other payload (compare with ``DONE``).

Lines are found by scanning only the bytes not scanned before, so a multi-megabyte data line that
arrives in small pieces costs linear time, and no line length limit short of ``max_line_bytes``
applies (aiohttp's own ``readline`` fails on lines over twice its read buffer).
"""

from __future__ import annotations

DONE = b"[DONE]"
DEFAULT_MAX_LINE_BYTES = 256 * 1024 * 1024

_LF = 0x0A
_COLON = 0x3A
_SPACE = 0x20
_BOM = b"\xef\xbb\xbf"


class SSEError(ValueError):
    """The byte stream cannot be an SSE stream (a line longer than the parser's limit)."""


class SSEParser:
    """Feed bytes with ``feed``; call ``flush`` at end of stream for an event left without a blank line."""

    __slots__ = ("_buf", "_data", "_max_line", "_scanned", "_skip_lf", "_started")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no line end
        self._data: bytes | None = None  # data of the event being assembled
        self._skip_lf = False  # the last line ended in CR at a chunk edge: a leading LF belongs to it
        self._started = False
        self._max_line = max_line_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume ``chunk``; return the data of every event it completed, in order."""
        if not chunk:
            return []
        buf = self._buf
        # Fast path for the usual network chunk: exactly one whole "data: ...\n\n" event.
        if (
            not buf
            and self._data is None
            and self._started
            and not self._skip_lf
            and chunk.startswith(b"data: ")
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk.endswith(b"\n\n")
            and b"\r" not in chunk
        ):
            return [chunk[6:-2]]
        events: list[bytes] = []
        buf += chunk
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                return events
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
            self._started = True
        if self._skip_lf and buf:
            if buf[0] == _LF:
                del buf[0]
            self._skip_lf = False
        start = 0
        pos = self._scanned
        end = len(buf)
        view = memoryview(buf)  # one copy per data line, straight from the buffer
        try:
            while pos < end:
                lf = buf.find(b"\n", pos)
                cr = buf.find(b"\r", pos, lf if lf >= 0 else end)
                if cr >= 0:
                    eol, nxt = cr, cr + 1
                    if nxt < end:
                        if buf[nxt] == _LF:
                            nxt += 1
                    else:
                        self._skip_lf = True
                elif lf >= 0:
                    eol, nxt = lf, lf + 1
                else:
                    break
                self._line(buf, view, start, eol, events)
                start = pos = nxt
        finally:
            view.release()
        if start:
            del buf[:start]
        self._scanned = len(buf)
        if self._scanned > self._max_line:
            raise SSEError(f"SSE line longer than {self._max_line} bytes without a line end")
        return events

    def flush(self) -> list[bytes]:
        """End of stream: return the data of an unterminated last line/event, if any."""
        events: list[bytes] = []
        buf = self._buf
        if buf:
            with memoryview(buf) as view:
                self._line(buf, view, 0, len(buf), events)
            buf.clear()
            self._scanned = 0
        if self._data is not None:
            events.append(self._data)
            self._data = None
        return events

    def _line(self, buf: bytearray, view: memoryview, start: int, end: int, events: list[bytes]) -> None:
        if start == end:
            if self._data is not None:
                events.append(self._data)
                self._data = None
            return
        # Only the data field matters here; comments (':'), event, id and retry lines are skipped.
        if not buf.startswith(b"data", start, end):
            return
        value_at = start + 4
        if value_at < end:
            if buf[value_at] != _COLON:
                return  # a field merely starting with "data"
            value_at += 1
            if value_at < end and buf[value_at] == _SPACE:
                value_at += 1
        value = bytes(view[value_at:end])
        self._data = value if self._data is None else self._data + b"\n" + value
