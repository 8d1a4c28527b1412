"""A real llama-server on the tiny model: health, exact streamed tokens, chat, slots, context limit, stop."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from llm_knee.engines.errors import EngineStartError
from llm_knee.engines.process import port_is_free
from llm_knee.engines.server import LlamaServer
from llm_knee.workload.words import COMMON_WORDS, START_WORDS
from tests.fixtures_llamacpp import running_llama_server

TIMEOUT = aiohttp.ClientTimeout(total=60)
GENERATED = {" " + word for word in COMMON_WORDS}


def _session() -> aiohttp.ClientSession:
    # llama-server closes connections after a streamed response although it advertises keep-alive;
    # a reused connection then fails at random, so these tests open a fresh one per request.
    return aiohttp.ClientSession(timeout=TIMEOUT, connector=aiohttp.TCPConnector(force_close=True))


def _prompt(n_words: int, salt: int) -> str:
    """``n_words`` common words (n_words + 1 tokens with BOS), different for each salt."""
    words = [START_WORDS[salt % len(START_WORDS)]]
    words += [COMMON_WORDS[(salt * 7919 + i * 31) % len(COMMON_WORDS)] for i in range(n_words - 1)]
    return " ".join(words)


async def _sse(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    async for raw in resp.content:
        line = raw.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            yield orjson.loads(line[len(b"data: ") :])


async def _stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with session.post(url, json={**body, "stream": True}) as resp:
        assert resp.status == 200, await resp.text()
        return [event async for event in _sse(resp)]


async def test_health_and_models_answer(llama_server: LlamaServer) -> None:
    async with _session() as session:
        async with session.get(llama_server.base_url + "/health") as resp:
            assert resp.status == 200
            assert (await resp.json())["status"] == "ok"
        async with session.get(llama_server.base_url + "/v1/models") as resp:
            assert resp.status == 200
            assert len((await resp.json())["data"]) == 1


async def test_a_streamed_completion_sends_one_chunk_per_token_and_usage_at_the_end(
    llama_server: LlamaServer,
) -> None:
    body = {"prompt": _prompt(20, salt=1), "max_tokens": 24, "ignore_eos": True, "temperature": 1.0}
    async with _session() as session:
        events = await _stream(session, llama_server.base_url + "/v1/completions", body)
    texts = [e["choices"][0]["text"] for e in events if e.get("choices") and e["choices"][0].get("text")]
    assert len(texts) == 24
    assert set(texts) <= GENERATED
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 24
    assert usage["prompt_tokens"] == 21  # 20 single-token words + BOS


async def test_a_streamed_chat_sends_one_delta_per_token_and_usage_when_asked(
    llama_server: LlamaServer,
) -> None:
    body = {
        "messages": [{"role": "user", "content": _prompt(12, salt=2)}],
        "max_tokens": 16,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    async with _session() as session:
        events = await _stream(session, llama_server.base_url + "/v1/chat/completions", body)
    deltas = [e["choices"][0]["delta"].get("content") for e in events if e.get("choices")]
    contents = [d for d in deltas if d]
    assert len(contents) == 16
    assert contents[0].strip() in COMMON_WORDS
    assert [e["usage"]["completion_tokens"] for e in events if e.get("usage")] == [16]


async def test_requests_beyond_the_slots_wait_in_the_queue(llama_server_binary: Path, tiny_gguf_model: Path) -> None:
    with running_llama_server(llama_server_binary, tiny_gguf_model, slots=2, ctx_per_slot=512) as server:
        url = server.base_url
        async with _session() as session:
            samples: list[tuple[float, float]] = []

            async def watch(done: asyncio.Event) -> None:
                while not done.is_set():
                    async with session.get(url + "/metrics") as resp:
                        gauges = _gauges(await resp.text())
                    samples.append((gauges["llamacpp:requests_processing"], gauges["llamacpp:requests_deferred"]))
                    await asyncio.sleep(0.02)

            body = {"max_tokens": 40, "ignore_eos": True}
            done = asyncio.Event()
            watcher = asyncio.create_task(watch(done))
            results = await asyncio.gather(
                *(_stream(session, url + "/v1/completions", {**body, "prompt": _prompt(8, s)}) for s in range(6))
            )
            done.set()
            await watcher
    assert [events[-1]["usage"]["completion_tokens"] for events in results] == [40] * 6
    assert max(processing for processing, _ in samples) == 2
    assert max(deferred for _, deferred in samples) >= 1


def _gauges(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


async def test_a_prompt_longer_than_the_slot_context_is_refused_with_the_servers_message(
    llama_server_binary: Path, tiny_gguf_model: Path
) -> None:
    with running_llama_server(llama_server_binary, tiny_gguf_model, slots=2, ctx_per_slot=128) as server:
        body = {"prompt": _prompt(300, salt=3), "max_tokens": 4}
        async with (
            _session() as session,
            session.post(server.base_url + "/v1/completions", json=body) as resp,
        ):
            status, payload = resp.status, await resp.json()
    assert status == 400
    assert "context" in payload["error"]["message"]


def test_stop_ends_the_process_and_frees_the_port(llama_server_binary: Path, tiny_gguf_model: Path) -> None:
    server = LlamaServer(llama_server_binary, tiny_gguf_model, slots=1, ctx_size=256).start()
    pid, port = server.pid, server.port
    assert pid is not None and server.running
    assert server.stop() == 0
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert port_is_free(port)


def test_a_file_that_is_not_a_model_fails_the_start_with_the_engines_log(
    llama_server_binary: Path, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF but not really" * 10)
    server = LlamaServer(llama_server_binary, junk, slots=1, startup_timeout_s=30)
    with pytest.raises(EngineStartError, match=r"(?s)exited with status .*failed to load model"):
        server.start()
    assert not server.running


def test_a_missing_model_or_a_binary_that_is_not_llama_server_is_refused(
    llama_server_binary: Path, tiny_gguf_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(EngineStartError, match="does not exist"):
        LlamaServer(llama_server_binary, tmp_path / "absent.gguf").start()
    with pytest.raises(EngineStartError, match="does not look like a working llama-server"):
        LlamaServer(Path(sys.executable), tiny_gguf_model).start()
