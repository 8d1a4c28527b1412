"""serve-sim's request parsing and fault drawing (pure functions; the HTTP path is in tests/integration)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from llm_knee.sim.faults import FAULT_CLASSES, FaultConfig, load_fault_file, parse_rates
from llm_knee.sim.server import RequestError, parse_request


def test_prompt_tokens_are_whitespace_words_unless_hinted() -> None:
    p = parse_request({"prompt": "one two  three\nfour", "max_tokens": 5}, False, 16, None)
    assert (p.prompt_tokens, p.max_tokens, p.stream) == (4, 5, False)
    assert parse_request({"prompt": [1, 2, 3]}, False, 16, None).prompt_tokens == 3
    assert parse_request({"prompt": "a"}, False, 16, "700").prompt_tokens == 700
    assert parse_request({"prompt": "a", "sim_prompt_tokens": 9}, False, 16, None).prompt_tokens == 9
    assert parse_request({"prompt": "a"}, False, 16, None).max_tokens == 16


def test_chat_counts_every_message_and_prefers_max_completion_tokens() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello there you"}]},
        ],
        "max_tokens": 3,
        "max_completion_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    p = parse_request(body, True, 16, None)
    assert (p.prompt_tokens, p.max_tokens, p.stream, p.include_usage) == (5, 8, True, True)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "JSON object"),
        ({"prompt": "a", "n": 2}, "n=1"),
        ({"prompt": "a", "max_tokens": "5"}, "max_tokens must be an integer"),
        ({"prompt": "a", "max_tokens": -1}, "at least 1"),
        ({"prompt": ""}, "prompt is empty"),
        ({"prompt": {"text": "a"}}, "prompt must be a string"),
        ({"prompt": "a", "stream": "yes"}, "stream must be true or false"),
        ({"prompt": "a", "sim_prompt_tokens": "many"}, "must be an integer"),
    ],
)
def test_bad_bodies(body: object, message: str) -> None:
    with pytest.raises(RequestError, match=message) as info:
        parse_request(body, False, 16, None)
    assert info.value.status == 400


def test_fault_draws_follow_the_rates() -> None:
    faults = FaultConfig(error_rates={"http_5xx": 0.2, "reset": 0.1})
    rng = random.Random(1)
    draws = [faults.draw(rng) for _ in range(20_000)]
    assert abs(draws.count("http_5xx") / 20_000 - 0.2) < 0.015
    assert abs(draws.count("reset") / 20_000 - 0.1) < 0.015
    assert set(draws) == {"http_5xx", "reset", None}
    assert FaultConfig().draw(rng) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"error_rates": {"timeout": 0.1}}, "unknown fault class"),
        ({"error_rates": {"reset": 1.5}}, "must be in"),
        ({"error_rates": {"reset": 0.6, "http_5xx": 0.6}}, "more than 1"),
        ({"stall_ms": 10.0}, "stall_every_s"),
        ({"http_5xx_status": 404}, "must be 5xx"),
    ],
)
def test_bad_fault_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaultConfig(**kwargs)  # type: ignore[arg-type]


def test_rates_from_the_command_line_and_files(tmp_path: Path) -> None:
    assert parse_rates(["http_5xx=0.05", "reset=0.01"]) == {"http_5xx": 0.05, "reset": 0.01}
    with pytest.raises(ValueError, match="CLASS=RATE"):
        parse_rates(["reset"])
    toml = tmp_path / "f.toml"
    toml.write_text("stall_ms = 50\nstall_every_s = 2\n[error_rates]\nmalformed = 0.1\n")
    assert FaultConfig(**load_fault_file(toml)).error_rates == {"malformed": 0.1}  # type: ignore[arg-type]
    bad = tmp_path / "f.json"
    bad.write_text('{"stal_ms": 5}')
    with pytest.raises(ValueError, match="unknown fault setting"):
        load_fault_file(bad)
    assert set(FAULT_CLASSES) == {"http_5xx", "http_4xx", "reset", "malformed", "disconnect"}
