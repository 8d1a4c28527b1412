"""`knee find --url` against a real llama.cpp ``llama-server`` (continuous batching, random-weight GGUF models).

The CLI runs in its own process, as a user runs it. What the server says about itself (``/metrics``
counters read before and after a run) is the witness our figures are checked against: the tokens it
generated and the prompt tokens it computed or took from its prompt cache.

Servers run with one thread: on a shared 2-core machine two llama.cpp threads wait for each other at
every step whenever another process holds a core, which makes per-token times jump by 100x.
"""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from llm_knee.engines.server import LlamaServer
from llm_knee.records.schema import ErrorClass, RequestRecord
from llm_knee.records.store import RunStore
from llm_knee.telemetry.server import parse_metrics_text
from tests.fixtures_llamacpp import (  # noqa: F401
    knee_gguf_model,
    llama_server_binary,
    running_llama_server,
    tiny_gguf_model,
)
from tests.integration.test_find import FAST, knee, only_run

KNEE_SLOTS = 4
TINY_SLOTS = 2
TINY_CTX_PER_SLOT = 256  # llama.cpp's smallest slot context; a 300-token prompt does not fit


@pytest.fixture(scope="module")
def knee_server(
    llama_server_binary: Path,  # noqa: F811
    knee_gguf_model: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama-knee-log") / "llama-server.log"
    with running_llama_server(
        llama_server_binary, knee_gguf_model, slots=KNEE_SLOTS, ctx_per_slot=512, threads=1, log_path=log
    ) as server:
        yield server


@pytest.fixture(scope="module")
def tiny_server(
    llama_server_binary: Path,  # noqa: F811
    tiny_gguf_model: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama-tiny-log") / "llama-server.log"
    with running_llama_server(
        llama_server_binary, tiny_gguf_model, slots=TINY_SLOTS, ctx_per_slot=TINY_CTX_PER_SLOT, threads=1,
        log_path=log,
    ) as server:  # fmt: skip
        yield server


def server_counters(server: LlamaServer) -> dict[str, float]:
    """The server's own ``llamacpp:*`` counters and gauges, unlabelled, by name without the prefix."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(server.base_url + "/metrics", timeout=10) as resp:
        parsed = parse_metrics_text(resp.read().decode())
    return {name.removeprefix("llamacpp:"): samples[0][1] for name, samples in parsed.items()}


def find(server: LlamaServer, out: Path, *args: str) -> tuple[dict[str, Any], dict[str, Any], list[RequestRecord]]:
    """Run `knee find --json` and return (printed analysis, result.json, every record of the run)."""
    res = knee("find", "--url", server.base_url, "--json", "--out", str(out), *FAST, *args, cwd=out)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    run = only_run(out)
    return orjson.loads(res.stdout), orjson.loads((run / "result.json").read_bytes()), RunStore.open(run).records()


def telemetry(level: dict[str, Any], name: str) -> dict[str, float]:
    series = level["telemetry"].get(name)
    assert series is not None, f"level {level['level']:g} has no {name}: {sorted(level['telemetry'])}"
    return dict(series)


def test_the_recommendation_stays_within_the_slots_and_the_figures_add_up(
    knee_server: LlamaServer, tmp_path: Path
) -> None:
    """Four slots: levels beyond them only queue (llamacpp:requests_deferred), so no recommendation above 4."""
    analysis, result, records = find(
        knee_server, tmp_path, "--levels", "1,2,4,8", "--input-len", "32", "--output-len", "32",
        "--max-duration", "4", "--telemetry-interval", "0.5",
    )  # fmt: skip
    assert analysis["throughput_knee"] is not None and analysis["latency_knee"] is not None, analysis["sentence"]
    rec = analysis["recommended_concurrency"]
    assert rec is not None and 1 <= rec <= KNEE_SLOTS, analysis["sentence"]
    assert analysis["sentence"].startswith("Run at most")
    assert all(r.ok for r in records), Counter(r.error for r in records)

    levels = {lv["level"]: lv for lv in result["levels"]}
    for lv in levels.values():
        assert lv["error_rate"] == 0
        assert lv["mean_output_tokens"] == 32
        assert lv["mean_input_tokens"] == 33  # 32 words and the BOS token the server adds
        # Throughput and request rate describe the same completions.
        assert lv["output_tok_s"] == pytest.approx(lv["req_s"] * 32, rel=0.15)
        # The server never runs more than its slots at once; what is beyond waits in its queue.
        assert telemetry(lv, "server.requests_running")["max"] <= KNEE_SLOTS
    one = levels[1]
    # Alone on the server a user decodes at 1 / TPOT.
    per_user, from_tpot = one["decode_tok_s_per_user_p50"], 1000 / one["tpot_p50_ms"]
    assert from_tpot / 2 <= per_user <= 2 * from_tpot, (per_user, from_tpot)
    # Little's law while every request has a slot: users in flight = request rate x time per request.
    for level in (1, 2, 4):
        in_flight = levels[level]["req_s"] * levels[level]["e2e_p50_ms"] / 1000
        assert 0.5 * level <= in_flight <= 1.5 * level, (level, in_flight)
    assert telemetry(one, "server.requests_waiting")["max"] == 0
    assert telemetry(levels[8], "server.requests_waiting")["max"] >= 1
    # Waiting for a slot is time to first token: it jumps once the slots are full, throughput does not.
    assert levels[8]["ttft_p50_ms"] > 2 * levels[4]["ttft_p50_ms"]
    assert levels[8]["output_tok_s"] < 1.5 * levels[4]["output_tok_s"]
    assert "server" in result["telemetry_sources"]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_both_apis_stream_exactly_the_tokens_asked_for_with_usage(
    tiny_server: LlamaServer, tmp_path: Path, api: str
) -> None:
    _, result, records = find(
        tiny_server, tmp_path, "--api", api, "--levels", "1,2", "--input-len", "20", "--output-len", "12",
        "--max-duration", "1.5", "--min-duration", "1",
    )  # fmt: skip
    assert result["target"]["api"] == api
    assert len(records) >= 4
    for r in records:
        assert r.ok, (r.error, r.error_detail)
        # ignore_eos: the server's usage, the request and the streamed chunks all say 12.
        assert (r.output_tokens_server, r.output_tokens_requested, r.output_chunks) == (12, 12, 12)
        assert len(r.itl_ns) == 11
        assert r.prompt_tokens_server is not None  # streaming usage arrived (chat: via include_usage)
        if api == "completions":
            assert r.prompt_tokens_server == 21  # 20 words + BOS
        else:
            assert r.prompt_tokens_server > 21  # the chat template's tokens come on top
    assert all(lv["mean_output_tokens"] == 12 for lv in result["levels"])


def test_a_prompt_longer_than_the_slot_context_is_a_4xx_with_the_servers_message(
    tiny_server: LlamaServer, tmp_path: Path
) -> None:
    res = knee(
        "find", "--url", tiny_server.base_url, "--json", "--out", str(tmp_path), *FAST, "--levels", "1,2",
        "--input-len", "300", "--output-len", "8", "--max-duration", "1", "--min-duration", "1", cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    analysis = orjson.loads(res.stdout)
    assert analysis["recommended_concurrency"] is None
    assert analysis["sentence"].startswith("No safe load found")
    assert any(al["name"] == "errors" for al in analysis["alarms"])
    run = only_run(tmp_path)
    records = RunStore.open(run).records()
    assert records
    for r in records:
        assert r.error is ErrorClass.HTTP_4XX and r.http_status == 400
        # The server's own explanation is kept, not just the status.
        assert r.error_detail.startswith("HTTP 400: ") and "context" in r.error_detail.lower(), r.error_detail
        assert "301" in r.error_detail  # the request's size as llama.cpp counted it
    result = orjson.loads((run / "result.json").read_bytes())
    assert all(lv["errors"]["http_4xx"] == lv["requests"] > 0 for lv in result["levels"])


def test_prompts_never_hit_the_prompt_cache_unless_a_shared_prefix_is_asked_for(
    tiny_server: LlamaServer, tmp_path: Path
) -> None:
    """llama.cpp counts prompt tokens it computed and those it took from its cache (slots and --cache-ram).

    Unique prompts share only the BOS token, including with every prompt of an earlier run against the
    same server (a rerun must not replay the same prompts); a shared prefix is taken from the cache.
    Our records carry the server's usage.prompt_tokens (computed + cached) and its cached part
    (prompt_tokens_details.cached_tokens); /metrics is the second witness.
    """
    args = ("--levels", "2", "--input-len", "64", "--output-len", "4", "--max-duration", "1.5", "--min-duration", "1")

    def measured_run(name: str, *extra: str) -> tuple[int, float, float]:
        before = server_counters(tiny_server)
        _, _, records = find(tiny_server, tmp_path / name, *args, *extra)
        after = server_counters(tiny_server)
        computed = after["prompt_tokens_total"] - before["prompt_tokens_total"]
        cached = after["prompt_tokens_cached_total"] - before["prompt_tokens_cached_total"]
        assert all(r.ok and r.prompt_tokens_server == 65 for r in records)
        assert computed + cached == 65 * len(records)  # every prompt token we sent, counted once
        # Each record also carries the server's own per-request cache hits (usage.prompt_tokens_details).
        assert all(r.prompt_tokens_cached is not None for r in records)
        assert sum(r.prompt_tokens_cached or 0 for r in records) == cached
        return len(records), computed / len(records), cached / len(records)

    seeds = []
    for name in ("first", "second"):  # the same command twice, as a user would rerun it
        (tmp_path / name).mkdir()
        n, computed, cached = measured_run(name)
        assert n >= 4
        assert cached <= 2.0, f"{name} run: {cached:.1f} prompt tokens per request came from the cache"
        assert computed >= 62
        seeds.append(RunStore.open(only_run(tmp_path / name)).read_spec()["workload"]["seed"])
    assert seeds[0] != seeds[1]  # each run drew its own seed and kept it, so it can be replayed with --seed
    (tmp_path / "prefix").mkdir()
    _, computed, cached = measured_run("prefix", "--shared-prefix", "48")
    # The 48 shared tokens are computed once per slot and then reused.
    assert cached >= 30 and computed <= 35, (computed, cached)


def test_stale_keep_alive_connections_are_retried_and_counted_never_errors(
    tiny_server: LlamaServer, tmp_path: Path
) -> None:
    """llama-server closes each connection after a stream while advertising keep-alive."""
    before = server_counters(tiny_server)
    _, result, records = find(
        tiny_server, tmp_path, "--levels", "2,4", "--input-len", "16", "--output-len", "16",
        "--max-duration", "1.5", "--min-duration", "1",
    )  # fmt: skip
    after = server_counters(tiny_server)
    errors = Counter(r.error for r in records if not r.ok)
    assert not errors, {cls: [r.error_detail for r in records if r.error is cls][:3] for cls in errors}
    for lv in result["levels"]:
        assert isinstance(lv["retries"], int) and lv["retries"] >= 0
        assert lv["retries"] == sum(r.retries for r in records if r.level_index == lv["level_index"] and not r.warmup)
        assert lv["ok"] == lv["requests"] > 0
        assert lv["errors"]["reset"] == lv["errors"]["refused"] == 0
    assert all(r.retries in (0, 1) for r in records)
    # The server generated each request's tokens once: a retried request was never served twice.
    assert after["tokens_predicted_total"] - before["tokens_predicted_total"] == 16 * len(records)
