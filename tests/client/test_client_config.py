"""ClientConfig validation and the request body the client builds from it."""

from __future__ import annotations

import orjson
import pytest

from llm_knee.client import ClientConfig, ClientConfigError, OpenAIClient


@pytest.mark.parametrize(
    "raw",
    ["http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1", " http://127.0.0.1:8000/v1/ "],
)
def test_base_url_with_or_without_v1_is_the_same_target(raw: str) -> None:
    cfg = ClientConfig(raw)
    assert cfg.base_url == "http://127.0.0.1:8000"
    assert cfg.endpoint_url == "http://127.0.0.1:8000/v1/completions"
    assert cfg.models_url == "http://127.0.0.1:8000/v1/models"
    assert cfg.health_url == "http://127.0.0.1:8000/health"


def test_path_prefix_before_v1_is_kept() -> None:
    cfg = ClientConfig("https://gateway.example/openai/v1", api="chat")
    assert cfg.endpoint_url == "https://gateway.example/openai/v1/chat/completions"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "127.0.0.1:8000"}, "http:// or https://"),
        ({"base_url": "ftp://host"}, "http:// or https://"),
        ({"base_url": "http://h:1/?a=b"}, "query"),
        ({"base_url": "http://h:1", "api": "embeddings"}, "api must be one of completions, chat"),
        ({"base_url": "http://h:1", "first_token_timeout_s": 0}, "first_token_timeout_s must be a positive"),
        ({"base_url": "http://h:1", "connect_timeout_s": -1.0}, "connect_timeout_s"),
        ({"base_url": "http://h:1", "max_connections": -1}, "max_connections"),
        ({"base_url": "http://h:1", "extra_body": {"stream": False}}, "extra_body may not set stream"),
        ({"base_url": "http://h:1", "model": "  "}, "model must be"),
    ],
)
def test_invalid_settings_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClientConfigError, match=message):
        ClientConfig(**kwargs)  # type: ignore[arg-type]


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ClientConfig("nonsense")


def test_connection_cap_is_never_below_the_concurrency() -> None:
    assert ClientConfig("http://h:1").connection_limit(500) == 0
    assert ClientConfig("http://h:1", max_connections=64).connection_limit(8) == 64
    assert ClientConfig("http://h:1", max_connections=64).connection_limit(200) == 200


def body(
    cfg: ClientConfig, prompt: str | None = "p", messages: list[dict[str, str]] | None = None
) -> dict[str, object]:
    parsed: dict[str, object] = orjson.loads(OpenAIClient(cfg, 0).build_body(prompt, messages, 32))
    return parsed


def test_completions_body_asks_for_exactly_n_streamed_tokens_with_usage() -> None:
    assert body(ClientConfig("http://h:1", model="m")) == {
        "model": "m",
        "prompt": "p",
        "max_tokens": 32,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "min_tokens": 32,
    }


def test_ignore_eos_off_sends_neither_ignore_eos_nor_min_tokens() -> None:
    sent = body(ClientConfig("http://h:1", ignore_eos=False))
    assert "ignore_eos" not in sent and "min_tokens" not in sent


def test_model_is_left_out_until_known() -> None:
    assert "model" not in body(ClientConfig("http://h:1"))


def test_extra_body_is_merged_last() -> None:
    sent = body(ClientConfig("http://h:1", extra_body={"temperature": 0.7, "stream_options": {}}))
    assert sent["temperature"] == 0.7 and sent["stream_options"] == {}


def test_chat_body_uses_messages_or_wraps_the_prompt() -> None:
    cfg = ClientConfig("http://h:1", api="chat")
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert body(cfg, None, msgs)["messages"] == msgs
    assert body(cfg, "hello")["messages"] == [{"role": "user", "content": "hello"}]


def test_requests_that_cannot_be_built_raise_value_error() -> None:
    client = OpenAIClient(ClientConfig("http://h:1"), 0)
    with pytest.raises(ValueError, match="output_tokens must be at least 1"):
        client.build_body("p", None, 0)
    with pytest.raises(ValueError, match="needs prompt_text"):
        client.build_body(None, [{"role": "user", "content": "u"}], 4)
