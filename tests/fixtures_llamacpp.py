"""Reusable pytest fixtures for tests against a real llama.cpp ``llama-server``.

Use them from a conftest.py::

    from tests.fixtures_llamacpp import (  # noqa: F401
        knee_gguf_model, llama_server, llama_server_binary, running_llama_server, tiny_gguf_model,
    )

- ``llama_server_binary`` (session): the binary from :func:`find_or_build_llama_server`, never built
  here (tests download nothing); ``.ci/run`` builds it first. Missing binary -> the session's tests fail
  with the command that builds it.
- ``tiny_gguf_model`` (session): a tiny random-weight LLaMA GGUF (256 wide, 4 layers, built-in
  1,578-token vocabulary, context 4096, 4.2 M weights, 8.5 MB) written once per session. Fast (about
  750 output tok/s for one stream on 2 shared cores) and dominated by per-request overheads: right for
  functional tests, too noisy for knee measurements.
- ``knee_gguf_model`` (session): 512 wide, 8 layers, FFN 1536 (29 M weights, 58 MB, written in about
  1 s). Compute-bound, so a ladder on 2 cores shows a knee: about 160, 240, 275, 290, 300, 275 output
  tok/s at concurrency 1, 2, 4, 8, 16, 32 with 16 slots, TTFT P50 70 ms rising to 1 s at 16 and 5 s at
  32 (64-token prompts and outputs; the shared machine makes these +-30 %).
- ``llama_server`` (session): one shared server on ``tiny_gguf_model`` with :data:`SHARED_SLOTS` slots and
  :data:`SHARED_CTX_PER_SLOT` tokens per slot, for tests that need *a* server and do not change it.
- :func:`running_llama_server`: a context manager for a test's own server (other slots, context, args).

A prompt of N words from ``llm_knee.workload.words.COMMON_WORDS`` joined by spaces is N + 1 tokens
for these models (the server adds BOS); generated tokens are always ``" <common word>"``, one per
stream chunk, and a request always runs to ``max_tokens`` (or the slot's context).

This server closes connections after a streamed response although it advertises keep-alive: a
client that reuses connections sees random failures of the next request on them (aiohttp:
"Can not write request body"). Use ``aiohttp.TCPConnector(force_close=True)`` unless that behaviour
is what the test is about.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from llm_knee.engines.errors import EngineNotFoundError
from llm_knee.engines.llamacpp import find_or_build_llama_server
from llm_knee.engines.server import LlamaServer
from llm_knee.engines.tiny_gguf import write_tiny_llama_gguf

SHARED_SLOTS = 4
SHARED_CTX_PER_SLOT = 1024
THREADS = 2


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    try:
        return find_or_build_llama_server(allow_build=False)
    except EngineNotFoundError as exc:
        pytest.fail(f"{exc}\n(.ci/run builds it via .ci/llama.sh)", pytrace=False)


@pytest.fixture(scope="session")
def tiny_gguf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("llama-model") / "tiny.gguf")


@pytest.fixture(scope="session")
def knee_gguf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llama-model") / "knee.gguf"
    return write_tiny_llama_gguf(path, n_embd=512, n_layer=8, n_ff=1536, n_head=8, n_head_kv=8)


@contextmanager
def running_llama_server(
    binary: Path,
    model: Path,
    *,
    slots: int = SHARED_SLOTS,
    ctx_per_slot: int = SHARED_CTX_PER_SLOT,
    threads: int = THREADS,
    extra_args: Sequence[str] = (),
    log_path: Path | None = None,
) -> Iterator[LlamaServer]:
    """A started server, stopped on exit; a failed start raises ``EngineStartError`` with the log tail."""
    server = LlamaServer(
        binary,
        model,
        slots=slots,
        threads=threads,
        ctx_size=slots * ctx_per_slot,
        extra_args=extra_args,
        log_path=log_path,
    )
    with server:
        yield server


@pytest.fixture(scope="session")
def llama_server(
    llama_server_binary: Path, tiny_gguf_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama-log") / "llama-server.log"
    with running_llama_server(llama_server_binary, tiny_gguf_model, log_path=log) as server:
        yield server
