"""JSONL prompt files: cycling in order, token counts, and errors that name the file and line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from llm_knee.workload.errors import PromptFileError
from llm_knee.workload.lengths import parse
from llm_knee.workload.prompts import PromptSource
from llm_knee.workload.spec import Api, WorkloadSpec

TokPath = Callable[[str], Path]


def write(tmp_path: Path, lines: list[Any], name: str = "prompts.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def source(path: Path, api: Api = "completions", tokenizer: Path | None = None, **kw: Any) -> PromptSource:
    tok = None if tokenizer is None else str(tokenizer)
    return PromptSource(WorkloadSpec(prompt_file=path, api=api, tokenizer=tok, **kw))


def test_lines_are_cycled_in_order_with_their_output_tokens(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            {"prompt": "tell me a story", "output_tokens": 50},
            "",
            {"prompt": "what is the time", "id": "extra fields are ignored"},
            {"prompt": "count to ten please", "output_tokens": 7},
        ],
    )
    prompts = source(path, output_len=parse("33")).take(7)
    assert [p.text for p in prompts[:3]] == ["tell me a story", "what is the time", "count to ten please"]
    assert [p.text for p in prompts[3:6]] == [p.text for p in prompts[:3]]
    assert [p.output_tokens for p in prompts[:3]] == [50, 33, 7]
    assert [p.prompt_tokens for p in prompts[:3]] == [4, 4, 4]  # whitespace words without a tokenizer
    assert all(p.exact is False and p.messages is None for p in prompts)


def test_missing_output_tokens_are_drawn_from_the_output_length(tmp_path: Path) -> None:
    path = write(tmp_path, [{"prompt": "a"}])
    outs = [p.output_tokens for p in source(path, output_len=parse("uniform:10,20"), seed=1).take(200)]
    assert min(outs) >= 10 and max(outs) <= 20 and len(set(outs)) > 5


def test_chat_api_takes_messages_and_turns_prompts_into_a_user_message(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    path = write(tmp_path, [{"messages": messages}, {"prompt": "hi you"}])
    first, second = source(path, api="chat").take(2)
    assert first.text is None and first.messages == messages
    assert first.prompt_tokens == 4
    assert second.messages == [{"role": "user", "content": "hi you"}]
    first.messages.append({"role": "user", "content": "changed"})  # a caller's change does not leak
    assert source(path, api="chat").next().messages == messages


def test_counts_are_exact_with_a_tokenizer(tmp_path: Path, tokenizer_path: TokPath) -> None:
    tok_path = tokenizer_path("bytelevel")
    tok = Tokenizer.from_file(str(tok_path))
    text = "the people of the water came to see the large mountain"
    messages = [{"role": "system", "content": "be kind"}, {"role": "user", "content": text}]
    path = write(tmp_path, [{"prompt": text}, {"messages": messages}])
    plain, chat = source(path, api="chat", tokenizer=tok_path).take(2)
    assert plain.prompt_tokens == len(tok.encode(text, add_special_tokens=False).ids)
    assert chat.prompt_tokens == sum(len(tok.encode(m["content"], add_special_tokens=False).ids) for m in messages)
    assert plain.exact and chat.exact


def test_workers_take_turns_over_the_lines(tmp_path: Path) -> None:
    path = write(tmp_path, [{"prompt": f"line {i}"} for i in range(5)])
    spec = WorkloadSpec(prompt_file=path)
    texts = [p.text for p in PromptSource(spec, worker=1, workers=2).take(4)]
    assert texts == ["line 1", "line 3", "line 0", "line 2"]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"prompt": "ok"', "invalid JSON"),
        ("[1, 2]", "expected a JSON object, got a list"),
        ('{"text": "hi"}', 'missing field "prompt" (text) or "messages"'),
        ('{"prompt": 5}', '"prompt" must be a string, got the number 5'),
        ('{"prompt": "   "}', '"prompt" is empty'),
        ('{"prompt": "a", "messages": []}', 'has both "prompt" and "messages"'),
        ('{"prompt": "a", "output_tokens": "9"}', '"output_tokens" must be a whole number, got text'),
        ('{"prompt": "a", "output_tokens": 2.5}', '"output_tokens" must be a whole number'),
        ('{"prompt": "a", "output_tokens": 0}', '"output_tokens" must be from 1'),
        ('{"prompt": "a", "output_tokens": true}', "got true/false"),
        ('{"messages": "hi"}', '"messages" must be a list'),
        ('{"messages": []}', '"messages" is an empty list'),
        ('{"messages": ["hi"]}', "messages[0] must be an object"),
        ('{"messages": [{"role": "user"}]}', 'messages[0] is missing "content"'),
        ('{"messages": [{"role": "user", "content": 3}]}', "messages[0].content must be a string"),
        ('{"messages": [{"role": "", "content": "x"}]}', "messages[0].role is empty"),
        ('{"messages": [{"role": "user", "content": " "}]}', '"messages" have no content'),
    ],
)
def test_a_bad_line_is_reported_with_file_line_and_reason(tmp_path: Path, line: str, says: str) -> None:
    path = write(tmp_path, ['{"prompt": "fine"}', "", line])
    with pytest.raises(PromptFileError) as info:
        source(path, api="chat")
    message = str(info.value)
    assert f"{path}:3: " in message
    assert says in message


def test_messages_need_the_chat_api(tmp_path: Path) -> None:
    path = write(tmp_path, [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(PromptFileError, match=r":1: has \"messages\" but the api is completions; use the chat api"):
        source(path)


def test_invalid_utf8_is_reported_by_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(PromptFileError, match=r"p.jsonl:2: not valid UTF-8"):
        source(path)


def test_all_bad_lines_are_listed_up_to_ten(tmp_path: Path) -> None:
    path = write(tmp_path, ["{bad"] * 13 + [{"prompt": "good"}])
    with pytest.raises(PromptFileError) as info:
        source(path)
    message = str(info.value)
    assert "has 13 bad lines" in message
    assert f"{path}:10: " in message and f"{path}:11: " not in message
    assert "... and 3 more bad lines" in message


def test_whole_file_is_checked_when_the_source_is_built(tmp_path: Path) -> None:
    path = write(tmp_path, [{"prompt": f"p{i}"} for i in range(500)] + ['{"prompt": null}'])
    with pytest.raises(PromptFileError, match=r":501: \"prompt\" must be a string, got null"):
        source(path)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "missing.jsonl", "does not exist"),
        (lambda d: d, "is a directory"),
        (lambda d: write(d, ["", "  "]), "holds no prompts"),
    ],
)
def test_unusable_files_are_clear_errors(tmp_path: Path, make: Callable[[Path], Path], says: str) -> None:
    with pytest.raises(PromptFileError, match=says):
        source(make(tmp_path))
