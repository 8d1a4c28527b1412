"""JSONL prompt files, validated whole before a run starts.

One JSON object per line::

    {"prompt": "Summarise the following ...", "output_tokens": 200}
    {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]}

``prompt`` (text, for either api) or ``messages`` (a list of ``{"role", "content"}`` text messages, chat
api only); ``output_tokens`` (optional whole number, else drawn from the spec's ``output_len``). Other
fields are ignored and blank lines are skipped. Every line is checked when the file is loaded, and all
problems (up to ten) are reported at once as ``FILE:LINE: what is wrong``.

``prompt_tokens`` is the exact token count of the prompt text, or the sum of the counts of the message
contents, when a tokenizer is given (a chat template adds its own tokens on the server); otherwise the
number of whitespace-separated words, a rough guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer

from llm_knee.workload.errors import PromptFileError
from llm_knee.workload.lengths import MAX_LENGTH
from llm_knee.workload.spec import Api

_MAX_REPORTED = 10
_FORMAT = 'each line must be a JSON object with "prompt" (text) or "messages" (list of {"role", "content"})'


@dataclass(frozen=True, slots=True)
class FilePrompt:
    """One validated line of a prompt file."""

    line: int  # 1-based line number in the file
    text: str | None
    messages: tuple[dict[str, str], ...] | None
    prompt_tokens: int
    output_tokens: int | None  # None: draw from the spec's output_len


def load_prompt_file(path: Path, *, api: Api, tokenizer: Tokenizer | None) -> list[FilePrompt]:
    """Read and validate a whole JSONL prompt file; raise :class:`PromptFileError` listing bad lines."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PromptFileError(f"prompt file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise PromptFileError(f"prompt file {str(path)!r} is a directory; give a .jsonl file") from None
    except OSError as exc:
        raise PromptFileError(f"cannot read prompt file {str(path)!r}: {exc.strerror or exc}") from None

    parsed: list[tuple[int, str | None, tuple[dict[str, str], ...] | None, int | None]] = []
    errors: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            parsed.append((number, *_parse_line(raw, api)))
        except _LineError as exc:
            errors.append(f"{path}:{number}: {exc}")
    if errors:
        shown = errors[:_MAX_REPORTED]
        more = f"\n... and {len(errors) - len(shown)} more bad lines" if len(errors) > len(shown) else ""
        raise PromptFileError(
            f"prompt file {str(path)!r} has {len(errors)} bad line{'s' if len(errors) > 1 else ''} "
            f"({_FORMAT}):\n" + "\n".join(shown) + more
        )
    if not parsed:
        raise PromptFileError(f"prompt file {str(path)!r} holds no prompts; {_FORMAT}")
    counts = _count_tokens([_texts(text, messages) for _, text, messages, _ in parsed], tokenizer)
    return [
        FilePrompt(line=number, text=text, messages=messages, prompt_tokens=tokens, output_tokens=out)
        for (number, text, messages, out), tokens in zip(parsed, counts, strict=True)
    ]


class _LineError(Exception):
    pass


def _parse_line(raw: bytes, api: Api) -> tuple[str | None, tuple[dict[str, str], ...] | None, int | None]:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _LineError(f"not valid UTF-8 (byte {exc.start} of the line)") from None
    try:
        obj: Any = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _LineError(f"invalid JSON at column {exc.colno}: {exc.msg}") from None
    if not isinstance(obj, dict):
        raise _LineError(f"expected a JSON object, got {_json_type(obj)}")
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt and has_messages:
        raise _LineError('has both "prompt" and "messages"; give one of them')
    if not has_prompt and not has_messages:
        raise _LineError('missing field "prompt" (text) or "messages" (list of {"role", "content"})')
    text: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    if has_prompt:
        text = obj["prompt"]
        if not isinstance(text, str):
            raise _LineError(f'"prompt" must be a string, got {_json_type(text)}')
        if not text.strip():
            raise _LineError('"prompt" is empty')
    else:
        if api != "chat":
            raise _LineError('has "messages" but the api is completions; use the chat api, or give "prompt" text')
        messages = _parse_messages(obj["messages"])
    output_tokens = obj.get("output_tokens")
    if output_tokens is not None:
        if isinstance(output_tokens, bool) or not isinstance(output_tokens, int):
            raise _LineError(f'"output_tokens" must be a whole number, got {_json_type(output_tokens)}')
        if not 1 <= output_tokens <= MAX_LENGTH:
            raise _LineError(f'"output_tokens" must be from 1 to {MAX_LENGTH}, got {output_tokens}')
    return text, messages, output_tokens


def _parse_messages(value: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        raise _LineError(f'"messages" must be a list of {{"role", "content"}} objects, got {_json_type(value)}')
    if not value:
        raise _LineError('"messages" is an empty list')
    out: list[dict[str, str]] = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise _LineError(f'messages[{i}] must be an object with "role" and "content", got {_json_type(message)}')
        for key in ("role", "content"):
            if key not in message:
                raise _LineError(f'messages[{i}] is missing "{key}"')
        for key, item in message.items():
            if not isinstance(item, str):
                raise _LineError(f"messages[{i}].{key} must be a string (text messages only), got {_json_type(item)}")
        if not message["role"].strip():
            raise _LineError(f"messages[{i}].role is empty")
        out.append(dict(message))
    if not any(m["content"].strip() for m in out):
        raise _LineError('"messages" have no content')
    return tuple(out)


def _texts(text: str | None, messages: tuple[dict[str, str], ...] | None) -> list[str]:
    if text is not None:
        return [text]
    return [m["content"] for m in messages or ()]


def _count_tokens(groups: list[list[str]], tokenizer: Tokenizer | None) -> list[int]:
    if tokenizer is None:
        return [sum(len(t.split()) for t in group) for group in groups]
    flat = [t for group in groups for t in group]
    encodings = tokenizer.encode_batch(flat, add_special_tokens=False)
    counts: list[int] = []
    pos = 0
    for group in groups:
        counts.append(sum(len(e.ids) for e in encodings[pos : pos + len(group)]))
        pos += len(group)
    return counts


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
