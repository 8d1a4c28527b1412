"""serve-sim end to end: a real process on 127.0.0.1, real HTTP, the project's own client.

Most tests share one server run 10x faster than real time; fault tests start their own.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llm_knee.client.config import ClientConfig
from llm_knee.client.openai import OpenAIClient
from llm_knee.records.schema import ErrorClass, RequestRecord
from tests.servers.launch import REPO_ROOT, start_server_module

MODEL = "Llama-3.1-8B"
SIM = "llm_knee.sim.cli"
TIMEOUT = aiohttp.ClientTimeout(total=30)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with start_server_module(SIM, speed=10, max_num_seqs=64, seed=1) as (base_url, _proc):
        yield base_url


def words(n: int) -> str:
    return " ".join(["hello"] * n)


async def send_with_client(base_url: str, api: str, lengths: list[tuple[int, int]]) -> list[RequestRecord]:
    cfg = ClientConfig(base_url, api=api, model=MODEL, total_timeout_s=60)  # type: ignore[arg-type]
    anchor = time.perf_counter_ns()
    async with OpenAIClient(cfg, anchor, concurrency=len(lengths)) as client:
        jobs = [
            client.send(words(p), None, o, RequestRecord(request_id=str(i), level_index=0, level=len(lengths)))
            for i, (p, o) in enumerate(lengths)
        ]
        return list(await asyncio.gather(*jobs))


async def get_json(base_url: str, path: str) -> Any:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.get(base_url + path) as r:
        assert r.status == 200, await r.text()
        return orjson.loads(await r.read())


async def scrape(base_url: str) -> dict[str, float]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.get(base_url + "/metrics") as r:
        text = await r.text()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_streams_carry_exactly_the_tokens_asked_for_with_usage(server: str, api: str) -> None:
    lengths = [(10 + 7 * i, 5 + 3 * i) for i in range(24)]
    records = await send_with_client(server, api, lengths)
    for rec, (prompt, output) in zip(records, lengths, strict=True):
        assert rec.error is ErrorClass.OK, rec.error_detail
        assert rec.http_status == 200
        assert rec.output_chunks == output
        assert rec.output_tokens_server == output
        assert rec.prompt_tokens_server == prompt
        assert rec.ttft_ns is not None and rec.ttft_ns > 0
        assert len(rec.itl_ns) == output - 1


async def test_metrics_use_vllm_names_and_count_what_was_served(server: str) -> None:
    before = await scrape(server)
    lengths = [(30, 12)] * 8
    await send_with_client(server, "completions", lengths)
    after = await scrape(server)
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:time_per_output_token_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "sim_event_loop_lag_seconds_count",
    ):
        assert name in after, name

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert delta("vllm:prompt_tokens_total") == 8 * 30
    assert delta("vllm:generation_tokens_total") == 8 * 12
    assert delta("vllm:time_to_first_token_seconds_count") == 8
    assert delta("vllm:inter_token_latency_seconds_count") == 8 * 11
    assert delta("vllm:request_success_total") == 8
    assert after["vllm:num_requests_running"] == 0


async def test_ground_truth_is_retrievable_and_matches_the_client_timing(server: str) -> None:
    body = {"model": MODEL, "prompt": words(64), "max_tokens": 20, "stream": True}
    arrivals: list[int] = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
        async with s.post(server + "/v1/completions", json=body, headers={"x-request-id": "truth-1"}) as r:
            rid = r.headers["x-request-id"]
            async for data in r.content.iter_any():
                now = time.perf_counter_ns()
                arrivals += [now] * data.count(b'"text"')
        truth = await get_json(server, f"/sim/truth?id={rid}")
    assert rid == "cmpl-truth-1" == truth["id"]
    assert truth["status"] == "finished" and truth["output_tokens"] == 20 and truth["prompt_tokens"] == 64
    assert len(truth["token_ns"]) == len(truth["written_ns"]) == len(arrivals) == 20
    assert truth["first_token_ns"] == truth["token_ns"][0]
    assert truth["token_offsets_ns"] == [t - truth["arrival_ns"] for t in truth["token_ns"]]
    for engine_t, written, seen in zip(truth["token_ns"], truth["written_ns"], arrivals, strict=True):
        # Never written before the engine produced it; the client sees it after the write, on one clock.
        assert engine_t <= written <= seen
        assert seen - written < 50_000_000
    # Looking up by the client's own x-request-id works too.
    assert (await get_json(server, "/sim/truth?id=truth-1"))["id"] == rid


async def test_non_streaming_models_and_health(server: str) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
        async with s.get(server + "/health") as r:
            assert r.status == 200
        models = await get_json(server, "/v1/models")
        assert [m["id"] for m in models["data"]] == [MODEL]
        body = {"model": MODEL, "messages": [{"role": "user", "content": words(9)}], "max_tokens": 7}
        async with s.post(server + "/v1/chat/completions", json=body) as r:
            answer = orjson.loads(await r.read())
        assert answer["usage"] == {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}
        assert len(answer["choices"][0]["message"]["content"].split()) == 7
        hinted = {"model": MODEL, "prompt": "x", "max_tokens": 2, "sim_prompt_tokens": 300}
        async with s.post(server + "/v1/completions", json=hinted) as r:
            assert orjson.loads(await r.read())["usage"]["prompt_tokens"] == 300


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"model": "gpt-4", "prompt": "hi", "max_tokens": 3}, 404, "does not exist"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": 200_000}, 400, "maximum context"),
        ({"model": MODEL, "prompt": "   ", "max_tokens": 3}, 400, "prompt is empty"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens must be at least 1"),
        ({"model": MODEL, "prompt": ["a", "b"], "max_tokens": 3}, 400, "batched prompts"),
    ],
)
async def test_bad_requests_are_refused_with_openai_errors(
    server: str, body: dict[str, Any], status: int, message: str
) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.post(server + "/v1/completions", json=body) as r:
        assert r.status == status
        err = orjson.loads(await r.read())["error"]
        assert message in err["message"] and err["code"] == status


async def test_a_client_that_goes_away_frees_its_place_in_the_engine(server: str) -> None:
    body = {"model": MODEL, "prompt": words(16), "max_tokens": 100_000, "stream": True}
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
        async with s.post(server + "/v1/completions", json=body) as r:
            seen = 0
            async for data in r.content.iter_any():
                seen += data.count(b'"text"')
                if seen >= 3:
                    break
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            stats = await get_json(server, "/sim/stats")
            if stats["running"] == 0 and stats["open_requests"] == 0:
                break
            await asyncio.sleep(0.05)
        assert stats["running"] == 0 and stats["open_requests"] == 0 and stats["kv_cache_usage"] == 0


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [
        ("http_5xx", ErrorClass.HTTP_5XX, 503),
        ("http_4xx", ErrorClass.HTTP_4XX, 429),
        ("reset", ErrorClass.RESET, 200),
        ("disconnect", ErrorClass.RESET, 200),
        ("malformed", ErrorClass.MALFORMED, 200),
    ],
)
async def test_faults_produce_the_expected_failure(fault: str, error: ErrorClass, status: int) -> None:
    with start_server_module(SIM, speed=20, error_rate={fault: 1.0}) as (base_url, _proc):
        records = await send_with_client(base_url, "completions", [(20, 10)] * 4)
        stats = await get_json(base_url, "/sim/stats")
    for rec in records:
        assert rec.error is error, (rec.error, rec.error_detail)
        assert rec.http_status == status
        if status == 200:
            assert 0 < rec.output_chunks < 10 or fault == "malformed"
    assert stats["open_requests"] == 0


async def test_fault_settings_from_a_file(tmp_path: Path) -> None:
    config = tmp_path / "faults.toml"
    config.write_text("http_4xx_status = 400\n[error_rates]\nhttp_4xx = 1.0\n")
    with start_server_module(SIM, speed=20, faults_config=config) as (base_url, _proc):
        records = await send_with_client(base_url, "chat", [(5, 5)])
    assert records[0].http_status == 400 and records[0].error is ErrorClass.HTTP_4XX


async def test_stalls_freeze_every_stream() -> None:
    with start_server_module(SIM, stall_ms=150, stall_every_s=0.3) as (base_url, _proc):
        records = await send_with_client(base_url, "completions", [(16, 150)] * 2)
    for rec in records:
        assert rec.ok
        assert max(rec.itl_ns) >= 140_000_000
        assert sorted(rec.itl_ns)[len(rec.itl_ns) // 2] < 20_000_000  # the other gaps stay decode-sized


def test_oom_crash_exits_like_a_real_engine_running_out_of_memory() -> None:
    cmd = [sys.executable, "-m", SIM, "--port", "0", "--speed", "50", "--oom-crash", "--gpu-memory-utilization", "0.3"]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("PORT "), line
        base_url = f"http://127.0.0.1:{int(line.split()[1])}"

        async def flood() -> None:
            body = {"model": MODEL, "prompt": "x", "sim_prompt_tokens": 2000, "max_tokens": 2000, "stream": True}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:

                async def one() -> None:
                    try:
                        async with s.post(base_url + "/v1/completions", json=body) as r:
                            await r.read()
                    except aiohttp.ClientError:
                        pass  # the server died under us: what this test expects

                await asyncio.gather(*(one() for _ in range(64)))

        asyncio.run(flood())
        assert proc.wait(timeout=20) == 1
        assert proc.stderr is not None
        assert "CUDA out of memory" in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "Llama-9B"], "Llama"),
        (["--max-num-seqs", "0"], "max_num_seqs must be at least 1"),
        (["--error-rate", "http_5xx"], "CLASS=RATE"),
        (["--model", "Llama-3.1-70B"], "does not fit"),
    ],
)
def test_bad_options_fail_before_listening(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", SIM, "--port", "0", *args], cwd=REPO_ROOT, capture_output=True, timeout=60
    )
    assert done.returncode == 2
    assert message in done.stderr.decode()
    assert b"PORT" not in done.stdout


async def test_our_clients_timestamps_against_the_engines_ground_truth(server: str) -> None:
    """The client's timing error, measured: every token time our client records lies after the server wrote
    that token and within a few ms of it (one monotonic clock on one host), under 16 concurrent streams."""
    n, out = 16, 24
    anchor = time.perf_counter_ns()
    records: list[RequestRecord] = []
    configs: list[ClientConfig] = []
    for i in range(n):  # one client per request id, so that each record can be matched to its truth
        configs.append(ClientConfig(server, model=MODEL, total_timeout_s=60, headers={"x-request-id": f"timing-{i}"}))
        records.append(RequestRecord(request_id=f"timing-{i}", level_index=0, level=n))
    clients = [OpenAIClient(cfg, anchor) for cfg in configs]
    for c in clients:
        await c.__aenter__()
    try:
        await asyncio.gather(*(c.send(words(32), None, out, r) for c, r in zip(clients, records, strict=True)))
    finally:
        for c in clients:
            await c.aclose()
    errors_ms: list[float] = []
    for rec in records:
        assert rec.ok, rec.error_detail
        truth = await get_json(server, f"/sim/truth?id={rec.request_id}")
        seen = [anchor + rec.first_token_ns]
        for gap in rec.itl_ns:
            seen.append(seen[-1] + gap)
        assert len(seen) == len(truth["written_ns"]) == out
        for written, ours in zip(truth["written_ns"], seen, strict=True):
            assert ours >= written  # never before the server wrote it: no clock mixing
            errors_ms.append((ours - written) / 1e6)
    errors_ms.sort()
    p50, p99 = errors_ms[len(errors_ms) // 2], errors_ms[int(len(errors_ms) * 0.99)]
    print(f"client timestamp error vs server write: p50 {p50:.3f} ms, p99 {p99:.3f} ms over {len(errors_ms)} tokens")
    # Loopback, 16 streams, a shared 2-core machine: the bound is loose on purpose; it catches clock mixing,
    # batching of chunks in the client's buffer and per-request sessions, not microseconds.
    assert p50 < 10.0 and p99 < 50.0, (p50, p99)
