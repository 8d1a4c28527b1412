"""The server sampler against a real llama.cpp ``llama-server``: its names detected, its queue seen under load.

Two slots and more requests than slots: llama.cpp runs two (``llamacpp:requests_processing``) and
defers the rest (``llamacpp:requests_deferred``), which we read as running and waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from llm_knee.engines.server import LlamaServer
from llm_knee.records.store import RunStore
from llm_knee.telemetry import names
from llm_knee.telemetry.server import ServerMetricsSampler
from llm_knee.workload.words import COMMON_WORDS
from tests.fixtures_llamacpp import llama_server_binary, running_llama_server, tiny_gguf_model  # noqa: F401
from tests.integration.test_find import FAST, knee, only_run

SLOTS = 2
LEVEL_METRICS = (names.SERVER_REQUESTS_RUNNING, names.SERVER_REQUESTS_WAITING, names.SERVER_GENERATION_TOKENS_TOTAL)


@pytest.fixture(scope="module")
def two_slot_server(
    llama_server_binary: Path,  # noqa: F811
    tiny_gguf_model: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama-telemetry-log") / "llama-server.log"
    with running_llama_server(
        llama_server_binary, tiny_gguf_model, slots=SLOTS, ctx_per_slot=1024, threads=1, log_path=log
    ) as server:
        yield server


async def _generate(session: aiohttp.ClientSession, url: str, salt: int, tokens: int) -> None:
    prompt = " ".join(COMMON_WORDS[(salt * 37 + i) % len(COMMON_WORDS)] for i in range(16))
    body = {"prompt": prompt, "max_tokens": tokens, "ignore_eos": True, "stream": True}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for _ in resp.content:
            pass


async def test_the_sampler_detects_llamacpp_and_sees_its_slots_fill_and_its_queue_grow(
    two_slot_server: LlamaServer,
) -> None:
    anchor = time.perf_counter_ns()

    def clock() -> int:
        return time.perf_counter_ns() - anchor

    sampler = ServerMetricsSampler(two_slot_server.base_url)
    status = await sampler.open(clock)
    try:
        assert status.available, status.reason
        assert sampler.engine == "llamacpp" and "llama.cpp" in status.detail
        idle = {s.name: s.value for s in await sampler.sample(clock)}
        assert idle[names.SERVER_REQUESTS_RUNNING] == 0 and idle[names.SERVER_REQUESTS_WAITING] == 0

        users, tokens = 5, 300
        timeline: list[dict[str, float]] = []
        stamps: list[int] = []
        # llama-server closes connections after a stream: one fresh connection per request.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            load = asyncio.gather(*(_generate(session, two_slot_server.base_url, i, tokens) for i in range(users)))
            async with asyncio.timeout(60):
                while not load.done():
                    samples = await sampler.sample(clock)
                    assert {s.source for s in samples} == {"server"}
                    stamps.extend(s.t_ns for s in samples[:1])
                    timeline.append({s.name: s.value for s in samples})
                    await asyncio.sleep(0.05)
                await load
        after = {s.name: s.value for s in await sampler.sample(clock)}
    finally:
        await sampler.close()

    running = [t[names.SERVER_REQUESTS_RUNNING] for t in timeline]
    waiting = [t[names.SERVER_REQUESTS_WAITING] for t in timeline]
    assert len(timeline) >= 5, timeline
    assert max(running) == SLOTS and all(0 <= r <= SLOTS for r in running)
    assert max(waiting) >= users - SLOTS - 1  # the requests beyond the slots were deferred
    assert stamps == sorted(stamps) and stamps[0] > 0
    assert after[names.SERVER_REQUESTS_RUNNING] == 0 and after[names.SERVER_REQUESTS_WAITING] == 0
    generated = after[names.SERVER_GENERATION_TOKENS_TOTAL] - idle[names.SERVER_GENERATION_TOKENS_TOTAL]
    assert generated == users * tokens
    assert 0 < timeline[len(timeline) // 2][names.SERVER_BUSY_SLOTS_PER_DECODE] <= SLOTS


def test_knee_find_puts_server_telemetry_in_every_level_and_finds_the_queue(
    two_slot_server: LlamaServer, tmp_path: Path
) -> None:
    res = knee(
        "find", "--url", two_slot_server.base_url, "--json", "--out", str(tmp_path), *FAST, "--levels", "1,4",
        "--input-len", "16", "--output-len", "64", "--max-duration", "2", "--min-duration", "1.5",
        "--telemetry-interval", "0.25", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "llama.cpp at " in res.stderr  # the telemetry line names the engine it recognised
    run = only_run(tmp_path)
    result = orjson.loads((run / "result.json").read_bytes())
    assert "server" in result["telemetry_sources"]
    levels = {lv["level"]: lv["telemetry"] for lv in result["levels"]}
    for level, tel in levels.items():
        for name in LEVEL_METRICS:
            assert name in tel, (level, sorted(tel))
        assert tel[names.SERVER_REQUESTS_RUNNING]["n"] >= 3
        assert tel[names.SERVER_REQUESTS_RUNNING]["max"] <= SLOTS
        assert tel[names.SERVER_GENERATION_TOKENS_TOTAL]["delta"] > 0
    assert levels[1][names.SERVER_REQUESTS_WAITING]["max"] == 0
    assert levels[4][names.SERVER_REQUESTS_WAITING]["mean"] >= 1  # two users always wait for a slot
    queueing = [v for v in result["verdicts"] if v["name"] == "queueing"]
    assert [v["level"] for v in queueing] == [4]
    samples = RunStore.open(run).telemetry()
    assert any(s.source == "server" and s.name == names.SERVER_REQUESTS_WAITING for s in samples)
