"""serve-sim: an OpenAI-compatible HTTP server whose token timing is the engine model in real time.

Endpoints: POST /v1/completions and /v1/chat/completions (streaming SSE or not), GET /v1/models,
/health, /metrics (vLLM's metric names), /sim/truth?id=<id> (the engine's own token times for one
request), /sim/stats (queue, tokens, the server's own event-loop lag; ``?reset=1`` restarts the lag
window) and /sim/info (what is being simulated).

Request conventions (stated in the banner and the README):
- prompt tokens = whitespace-separated words of the prompt (chat: of every message's text), unless the
  request says otherwise with a ``x-sim-prompt-tokens`` header or a ``sim_prompt_tokens`` body field;
  a completions prompt given as token ids counts those ids;
- exactly ``max_tokens`` tokens are generated (ignore_eos semantics, always); default 16;
- usage: on the last content chunk for streaming completions (or, with stream_options.include_usage,
  in a final chunk with no choices, as for chat);
- the request id is ``cmpl-<x-request-id>`` / ``chatcmpl-<x-request-id>`` when the client sends an
  ``x-request-id`` header (as vLLM does), else generated; it is in the body's ``id`` and in the
  response's ``x-request-id`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llm_knee.sim.config import EngineConfig
from llm_knee.sim.faults import FaultConfig
from llm_knee.sim.looplag import LoopLagMonitor
from llm_knee.sim.metrics import EngineGauges, build_registry
from llm_knee.sim.realtime import RealtimeEngine, Sink
from llm_knee.sim.request import RequestSpec
from llm_knee.sim.runs import SimConfig

WORDS = (" the", " of", " and", " to", " in", " a", " is", " that")
OOM_EXIT_CODE = 1
SLOW_CLIENT_BYTES = 48 * 1024  # below the transport's 64 KiB high-water mark: never block the engine task
MALFORMED_EVENT = b'data: {"id": "broken", "choices": [{"text": \n\n'


@dataclass(frozen=True)
class ServeSimSettings:
    model: str = "Llama-3.1-8B"
    gpu: str = "H100-SXM"
    dtype: str = "bf16"
    tp: int = 1
    kv_dtype: str | None = None
    served_model_name: str | None = None  # the name clients must send (default: ``model``)
    engine: EngineConfig = field(default_factory=EngineConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    speed: float = 1.0
    seed: int = 0
    default_max_tokens: int = 16
    truth_keep: int = 4096
    lag_interval_ms: float = 5.0

    @property
    def name(self) -> str:
        return self.served_model_name or self.model


class RequestError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def error_response(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"object": "error", "error": {"message": message, "type": kind, "code": status}, "message": message}
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json", headers=headers or {})


@dataclass(frozen=True, slots=True)
class Parsed:
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    priority: int


def _int_field(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{key} must be an integer (got {value!r})")
    return value


def count_words(text: object) -> int:
    if isinstance(text, str):
        return len(text.split())
    raise RequestError(400, f"expected text, got {type(text).__name__}")


def parse_request(body: object, chat: bool, default_max_tokens: int, hint_header: str | None) -> Parsed:
    """Validate an OpenAI request body; prompt tokens counted as documented in the module docstring."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    if (_int_field(body, "n") or 1) != 1:
        raise RequestError(400, "serve-sim supports n=1 only")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "messages must be a non-empty list")
        words = 0
        for msg in messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):  # content parts: count the text ones
                words += sum(count_words(p.get("text", "")) for p in content if isinstance(p, dict))
            elif content is not None:
                words += count_words(content)
        max_tokens = _int_field(body, "max_completion_tokens") or _int_field(body, "max_tokens")
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            words = count_words(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            words = len(prompt)  # token ids
        else:
            raise RequestError(400, "prompt must be a string or a list of token ids (batched prompts: send one each)")
        max_tokens = _int_field(body, "max_tokens")
    hint = body.get("sim_prompt_tokens", hint_header)
    if hint is not None:
        try:
            words = int(hint)
        except (TypeError, ValueError):
            raise RequestError(
                400, f"sim_prompt_tokens / x-sim-prompt-tokens must be an integer (got {hint!r})"
            ) from None
    if words <= 0:
        raise RequestError(400, "the prompt is empty (serve-sim counts whitespace-separated words)")
    if max_tokens is None:
        max_tokens = default_max_tokens
    if max_tokens <= 0:
        raise RequestError(400, f"max_tokens must be at least 1 (got {max_tokens})")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, "stream must be true or false")
    options = body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage", False)) if isinstance(options, dict) else False
    return Parsed(words, max_tokens, stream, include_usage, _int_field(body, "priority") or 0)


def _reset(transport: asyncio.Transport) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a FIN: the client sees 'connection reset by peer'."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _drop_connection(sink: Sink, transport: asyncio.Transport) -> bool:
    """Apply a connection-level fault (reset or disconnect) due now; True when the connection is gone."""
    if sink.fault == "reset":
        _reset(transport)
        sink.finish("reset")
        return True
    if sink.fault == "disconnect":
        transport.close()
        sink.finish("disconnect")
        return True
    return False


class _Frames:
    """Pre-serialised SSE events of one stream: each token costs a bytes lookup, not a JSON dump."""

    def __init__(self, rid: str, model: str, chat: bool, parsed: Parsed) -> None:
        created = int(time.time())
        usage = {
            "prompt_tokens": parsed.prompt_tokens,
            "completion_tokens": parsed.max_tokens,
            "total_tokens": parsed.prompt_tokens + parsed.max_tokens,
        }
        self.usage = usage

        def event(obj: dict[str, Any]) -> bytes:
            return b"data: " + orjson.dumps(obj) + b"\n\n"

        def chunk(word: str, finish: str | None) -> dict[str, Any]:
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": word}, "logprobs": None}
                kind = "chat.completion.chunk"
            else:
                choice = {"index": 0, "text": word, "logprobs": None, "stop_reason": None}
                kind = "text_completion"
            choice["finish_reason"] = finish
            return {"id": rid, "object": kind, "created": created, "model": model, "choices": [choice]}

        self.tokens = [event(chunk(w, None)) for w in WORDS]
        last = chunk(WORDS[(parsed.max_tokens - 1) % len(WORDS)], "length")
        tail = b""
        if parsed.include_usage:
            usage_chunk = chunk("", None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = usage
            tail = event(usage_chunk)
        elif not chat:
            last["usage"] = usage
        self.final = event(last) + tail + b"data: [DONE]\n\n"
        self.role = event(
            {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                ],
            }
        )


class SseSink(Sink):
    __slots__ = ("frames", "resp", "transport")

    def __init__(
        self,
        rt: RealtimeEngine,
        rid: str,
        spec: RequestSpec,
        fault: str | None,
        resp: web.StreamResponse,
        transport: asyncio.Transport,
        frames: _Frames,
    ) -> None:
        super().__init__(rt, rid, spec, fault)
        self.resp: web.StreamResponse | None = resp
        self.transport: asyncio.Transport | None = transport
        self.frames: _Frames | None = frames

    async def deliver(self, n: int, final: bool) -> bool:
        tr = self.transport
        resp = self.resp
        if tr is None or resp is None or tr.is_closing():
            self.finish("client_gone")
            return False
        frames = self.frames
        if frames is None:
            return False
        data = frames.final if final else frames.tokens[(n - 1) & 7]
        if self.fault is not None and n == self.fault_at:
            if _drop_connection(self, tr):
                return False
            if self.fault == "malformed":
                data = MALFORMED_EVENT + data
        if tr.get_write_buffer_size() > SLOW_CLIENT_BYTES:
            tr.close()
            self.finish("slow_client")
            return False
        try:
            await resp.write(data)
        except (ConnectionError, RuntimeError):
            self.finish("client_gone")
            return False
        return True

    def finish(self, status: str) -> None:
        super().finish(status)
        self.resp = None  # the truth outlives the response; do not keep the response alive with it
        self.transport = None
        self.frames = None


class CollectSink(Sink):
    """Non-streaming: tokens only count; the JSON body is written once at the end."""

    __slots__ = ("malformed", "transport")

    def __init__(
        self, rt: RealtimeEngine, rid: str, spec: RequestSpec, fault: str | None, transport: asyncio.Transport
    ) -> None:
        super().__init__(rt, rid, spec, fault)
        self.transport: asyncio.Transport | None = transport
        self.malformed = False

    async def deliver(self, n: int, final: bool) -> bool:
        tr = self.transport
        if tr is None or tr.is_closing():
            self.finish("client_gone")
            return False
        if self.fault is not None and n == self.fault_at:
            if _drop_connection(self, tr):
                return False
            self.malformed = self.fault == "malformed"
        return True

    def finish(self, status: str) -> None:
        super().finish(status)
        self.transport = None


def build_realtime(settings: ServeSimSettings, on_oom: Callable[[str], None] | None = None) -> RealtimeEngine:
    engine_cfg = settings.engine
    if settings.faults.oom_crash:
        engine_cfg = EngineConfig(**{**asdict(engine_cfg), "on_kv_exhausted": "crash"})
    cfg = SimConfig.from_catalog(
        settings.model, settings.gpu, settings.dtype, settings.tp, kv_dtype=settings.kv_dtype, engine=engine_cfg
    )
    engine = cfg.build_engine(settings.seed, track_tokens=True)
    return RealtimeEngine(
        engine, speed=settings.speed, faults=settings.faults, on_oom=on_oom, truth_keep=settings.truth_keep
    )


def oom_exit(message: str) -> None:
    """What a real engine does when KV (or activations) exceed GPU memory: die loudly."""
    sys.stderr.write(f"torch.OutOfMemoryError: CUDA out of memory (simulated by serve-sim). {message}\n")
    sys.stderr.flush()
    os._exit(OOM_EXIT_CODE)


class SimServer:
    def __init__(self, settings: ServeSimSettings, rt: RealtimeEngine) -> None:
        self.settings = settings
        self.rt = rt
        self.rng = random.Random(settings.seed)
        self.lag = LoopLagMonitor(settings.lag_interval_ms / 1e3)
        self.lag.observers.append(rt.metrics.loop_lag)
        eng = rt.engine
        gauges = EngineGauges(
            running=lambda: eng.num_running,
            waiting=lambda: eng.num_waiting,
            kv_usage=lambda: eng.kv_usage,
            preemptions=lambda: eng.num_preemptions,
        )
        self.registry = build_registry(settings.name, gauges, rt.metrics)
        self._counter = 0
        self.started = int(time.time())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/sim/truth", self.truth)
        app.router.add_get("/sim/stats", self.stats)
        app.router.add_get("/sim/info", self.info)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _startup(self, _app: web.Application) -> None:
        self.rt.start()
        self.lag.start()

    async def _cleanup(self, _app: web.Application) -> None:
        await self.lag.stop()
        await self.rt.stop()

    # --- small endpoints
    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, _request: web.Request) -> web.Response:
        data = {
            "object": "list",
            "data": [
                {
                    "id": self.settings.name,
                    "object": "model",
                    "created": self.started,
                    "owned_by": "llm-knee serve-sim",
                    "root": self.settings.model,
                    "max_model_len": self.rt.engine.max_len,
                }
            ],
        }
        return web.Response(body=orjson.dumps(data), content_type="application/json")

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def truth(self, request: web.Request) -> web.Response:
        rid = request.query.get("id", "")
        found = self.rt.truth(rid) or self.rt.truth(f"cmpl-{rid}") or self.rt.truth(f"chatcmpl-{rid}")
        if found is None:
            return error_response(404, f"no ground truth kept for request id {rid!r}", "NotFoundError")
        return web.Response(body=orjson.dumps(found), content_type="application/json")

    async def stats(self, request: web.Request) -> web.Response:
        reset = request.query.get("reset", "") in ("1", "true", "yes")
        body = {**self.rt.stats(), "loop_lag": self.lag.snapshot(reset=reset)}
        if reset:
            self.rt.reset_peaks()
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def info(self, _request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.describe()), content_type="application/json")

    def describe(self) -> dict[str, Any]:
        s = self.settings
        eng = self.rt.engine
        return {
            "model": s.model,
            "served_model_name": s.name,
            "gpu": s.gpu,
            "dtype": s.dtype,
            "tp": s.tp,
            "kv_blocks": eng.pool.total,
            "block_size": eng.block_size,
            "kv_capacity_tokens": eng.pool.total * eng.block_size,
            "max_model_len": eng.max_len,
            "engine": asdict(s.engine),
            "faults": s.faults.to_dict(),
            "speed": s.speed,
            "prompt_tokens_rule": "whitespace-separated words, or the x-sim-prompt-tokens header / sim_prompt_tokens",
        }

    # --- completions
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    def _request_id(self, request: web.Request, chat: bool) -> str:
        prefix = "chatcmpl-" if chat else "cmpl-"
        base = request.headers.get("x-request-id")
        self._counter += 1
        if not base:
            base = f"{self.rng.getrandbits(48):012x}{self._counter:06d}"
        rid = prefix + base
        if self.rt.truth(rid) is not None:
            rid = f"{rid}-{self._counter}"
        return rid

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            raw = await request.read()
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise RequestError(400, f"the request body is not valid JSON: {exc}") from None
            model = body.get("model") if isinstance(body, dict) else None
            if model is not None and model != self.settings.name:
                raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError")
            parsed = parse_request(
                body, chat, self.settings.default_max_tokens, request.headers.get("x-sim-prompt-tokens")
            )
            spec = RequestSpec(parsed.prompt_tokens, parsed.max_tokens, parsed.priority)
            try:
                self.rt.validate(spec)
            except ValueError as exc:
                raise RequestError(400, str(exc)) from None
        except RequestError as err:
            return error_response(err.status, err.message, err.kind)
        rid = self._request_id(request, chat)
        headers = {"x-request-id": rid}
        fault = self.settings.faults.draw(self.rng)
        if fault == "http_5xx":
            self.rt.metrics.requests_failed += 1
            status = self.settings.faults.http_5xx_status
            return error_response(status, "simulated server error (serve-sim fault)", "InternalServerError", headers)
        if fault == "http_4xx":
            self.rt.metrics.requests_failed += 1
            status = self.settings.faults.http_4xx_status
            return error_response(status, "simulated client error (serve-sim fault)", "RateLimitError", headers)
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("client went away before the request was served")
        sink: Sink
        resp: web.StreamResponse | None = None
        if parsed.stream:
            frames = _Frames(rid, self.settings.name, chat, parsed)
            resp = web.StreamResponse(
                headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            try:
                await resp.prepare(request)
                if chat:
                    await resp.write(frames.role)
            except ConnectionError:
                return resp  # the client left before anything was scheduled
            sink = SseSink(self.rt, rid, spec, fault, resp, transport, frames)
        else:
            sink = CollectSink(self.rt, rid, spec, fault, transport)
        self.rt.submit(sink)
        try:
            await sink.done
        except asyncio.CancelledError:
            sink.finish("client_gone")
            raise
        if resp is not None:
            return resp
        if sink.status != "finished":
            return web.Response(status=499)  # the connection is already gone; nothing is sent
        return self._full_response(rid, chat, parsed, headers, isinstance(sink, CollectSink) and sink.malformed)

    def _full_response(
        self, rid: str, chat: bool, parsed: Parsed, headers: dict[str, str], malformed: bool
    ) -> web.Response:
        text = "".join(WORDS[i & 7] for i in range(parsed.max_tokens))
        usage = {
            "prompt_tokens": parsed.prompt_tokens,
            "completion_tokens": parsed.max_tokens,
            "total_tokens": parsed.prompt_tokens + parsed.max_tokens,
        }
        choice: dict[str, Any]
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        body = {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.settings.name,
            "choices": [choice],
            "usage": usage,
        }
        data = orjson.dumps(body)
        if malformed:
            data = data[: len(data) // 2]
        return web.Response(body=data, content_type="application/json", headers=headers)


def create_app(settings: ServeSimSettings, on_oom: Callable[[str], None] | None = None) -> web.Application:
    """The aiohttp application (the engine task starts with the app)."""
    return SimServer(settings, build_realtime(settings, on_oom)).app()


async def serve(
    settings: ServeSimSettings,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready: Callable[[SimServer, int], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run until ``stop`` is set (or forever). ``ready(server, port)`` is called once listening."""
    server = SimServer(settings, build_realtime(settings, oom_exit))
    runner = web.AppRunner(server.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        bound = runner.addresses[0][1]
        # Everything alive now (modules, the catalog, the app) lives as long as the process: keep it out of
        # the collector's full passes, which would otherwise pause every stream for milliseconds.
        gc.collect()
        gc.freeze()
        if ready is not None:
            ready(server, bound)
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()
