"""A real OpenAI-compatible streaming server with a fixed number of slots, for tests.

Run it in its own process::

    python -m tests.servers.slot_server --port 0 --slots 8 --token-delay-ms 5 --prefill-ms-per-token 0.02

It prints ``PORT <n>`` on stdout once it listens on 127.0.0.1. Capacity is the slot count: requests
beyond it queue (never rejected). A running request sleeps a prefill delay proportional to its prompt
(whitespace-separated words count as tokens), then emits exactly ``max_tokens`` tokens, one per chunk,
one every ``--token-delay-ms`` — or stops early at ``--eos-after`` tokens when the request neither sets
``ignore_eos`` nor a larger ``min_tokens``. ``echo: true`` (completions) puts the prompt in the first
chunk, which makes arbitrarily long SSE lines.

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed with ``usage`` when
``stream_options.include_usage``, or a single JSON answer), ``GET /v1/models``, ``GET /health``,
``GET /stats`` (counters, maxima seen, the last request body without its prompt) and
``POST /stats/reset``. With ``--api-key`` the API endpoints answer 401 without ``Bearer <key>``.

Faults, for the whole server (``--fault NAME``, ``--fault-rate NAME=P`` repeatable, seeded) or per
request (header ``x-fault: NAME``; ``none`` disables): see ``FAULTS``. A fault may take an argument
after a colon, e.g. ``error_object:400``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import signal
import socket
import struct
import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

FAULTS: dict[str, str] = {
    "http500": "answer HTTP 500 with an OpenAI error body",
    "http429": "answer HTTP 429 (rate limited) with an OpenAI error body",
    "http400": "answer HTTP 400 with an OpenAI error body (all http faults: argument N adds N chars to the message)",
    "malformed_json": "a non-JSON data line after half the tokens",
    "invalid_utf8": "a data line with invalid UTF-8 after half the tokens",
    "error_object": "HTTP 200, then after half the tokens data: {'error': {...}} (code from the argument, 500)",
    "empty_choices": "every chunk has choices: [] and no content",
    "truncate": "after half the tokens, end the body cleanly without [DONE]",
    "reset": "after half the tokens, reset the TCP connection (RST)",
    "hang": "send the headers, then nothing",
    "hang_before_headers": "send nothing at all",
    "short": "stop at half the tokens, with usage saying so and [DONE]",
    "unstreamed": "answer with one application/json body although stream was asked for",
    "error_json": "HTTP 200 application/json with an error object (code from the argument, default 500)",
    "hang_after_done": "send the whole stream with [DONE], then never end the body",
    "reset_after_done": "send the whole stream with [DONE], then reset the connection before the body's end",
    "close_after_stream": "advertise keep-alive, but the connection is dead after this response: the next "
    "request on it sees the connection closed before any response byte (llama.cpp's behaviour, made "
    "deterministic)",
}
HANG_S = 3600.0


@dataclass
class Options:
    slots: int = 8
    token_delay_ms: float = 5.0
    prefill_ms_per_token: float = 0.02
    fault: str | None = None
    fault_rates: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    api_key: str | None = None
    eos_after: int | None = None
    model: str = "slot-model"
    no_models: bool = False  # serve no /v1/models listing (only /health), like some minimal servers


@dataclass
class Stats:
    requests_received: int = 0
    requests_served: int = 0  # streams or answers completed in full (faults excluded)
    in_flight: int = 0
    max_in_flight: int = 0
    running: int = 0
    max_running: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    last_request: dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        self.requests_received = self.requests_served = 0
        self.max_in_flight, self.max_running = self.in_flight, self.running
        self.faults = {}
        self.last_request = {}


def parse_fault(spec: str) -> tuple[str, str]:
    name, _, arg = spec.partition(":")
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
    return name, arg


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _error_body(status: int, message: str, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


class SlotServer:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.stats = Stats()
        self.slots = asyncio.Semaphore(opts.slots)
        self.rng = random.Random(opts.seed)
        self.serials = itertools.count(1)
        self.dead_connections: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self._dead_connection_mw])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        if not self.opts.no_models:
            app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.get_stats)
        app.router.add_post("/stats/reset", self.reset_stats)
        return app

    @web.middleware
    async def _dead_connection_mw(self, request: web.Request, handler: Any) -> web.StreamResponse:
        transport = request.transport
        if transport is not None and transport in self.dead_connections:
            transport.close()
            raise asyncio.CancelledError  # nothing may be written on this connection any more
        response: web.StreamResponse = await handler(request)
        return response

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.stats.__dict__), content_type="application/json")

    async def reset_stats(self, request: web.Request) -> web.Response:
        self.stats.reset()
        return web.json_response({"status": "reset"})

    def _unauthorised(self, request: web.Request) -> web.Response | None:
        if self.opts.api_key is None:
            return None
        if request.headers.get("Authorization") == f"Bearer {self.opts.api_key}":
            return None
        return _error_body(401, "invalid or missing API key", "authentication_error")

    async def models(self, request: web.Request) -> web.Response:
        denied = self._unauthorised(request)
        if denied is not None:
            return denied
        data = [{"id": self.opts.model, "object": "model", "owned_by": "slot_server"}]
        return web.json_response({"object": "list", "data": data})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    def _pick_fault(self, request: web.Request) -> tuple[str, str] | None:
        header = request.headers.get("x-fault")
        if header is not None:
            return None if header == "none" else parse_fault(header)
        if self.opts.fault is not None:
            return parse_fault(self.opts.fault)
        if self.opts.fault_rates:
            draw = self.rng.random()
            for name, rate in self.opts.fault_rates.items():
                if draw < rate:
                    return parse_fault(name)
                draw -= rate
        return None

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        denied = self._unauthorised(request)
        if denied is not None:
            return denied
        try:
            body = orjson.loads(await request.read())
            fault = self._pick_fault(request)
        except (orjson.JSONDecodeError, ValueError) as exc:
            return _error_body(400, f"bad request: {exc}", "invalid_request_error")
        if not isinstance(body, dict):
            return _error_body(400, "the body must be a JSON object", "invalid_request_error")
        stats = self.stats
        stats.requests_received += 1
        stats.last_request = {k: v for k, v in body.items() if k not in ("prompt", "messages")}
        if fault is not None:
            stats.faults[fault[0]] = stats.faults.get(fault[0], 0) + 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            return await self._admit(request, body, chat, fault)
        finally:
            stats.in_flight -= 1

    async def _admit(
        self, request: web.Request, body: dict[str, Any], chat: bool, fault: tuple[str, str] | None
    ) -> web.StreamResponse:
        name, arg = fault if fault else ("", "")
        if name in ("http500", "http429", "http400"):
            status = int(name[4:])
            padding = " " + "x" * int(arg) if arg else ""  # the argument makes the message that much longer
            return _error_body(status, f"simulated HTTP {status} from slot_server{padding}", "server_error")
        if name == "hang_before_headers":
            await asyncio.sleep(HANG_S)
        if chat:
            messages = body.get("messages") or []
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            prompt = str(body.get("prompt", ""))
        prompt_tokens = len(prompt.split())
        max_tokens = int(body.get("max_tokens") or 16)
        n_tokens = max_tokens
        if self.opts.eos_after is not None and not body.get("ignore_eos"):
            n_tokens = min(max_tokens, max(self.opts.eos_after, int(body.get("min_tokens") or 0)))
        stats = self.stats
        async with self.slots:
            stats.running += 1
            stats.max_running = max(stats.max_running, stats.running)
            try:
                await asyncio.sleep(prompt_tokens * self.opts.prefill_ms_per_token / 1000.0)
                serial = next(self.serials)
                gen = _Generation(chat, self.opts.model, prompt, prompt_tokens, n_tokens, max_tokens, body, serial)
                if name == "error_json":
                    err = {"message": "simulated failure", "type": "server_error", "code": int(arg or 500)}
                    return web.Response(body=orjson.dumps({"error": err}), content_type="application/json")
                if body.get("stream") and name != "unstreamed":
                    return await self._stream(request, gen, fault)
                await asyncio.sleep(n_tokens * self.opts.token_delay_ms / 1000.0)
                if not name:
                    stats.requests_served += 1
                return web.Response(body=orjson.dumps(gen.whole()), content_type="application/json")
            finally:
                stats.running -= 1

    async def _stream(
        self, request: web.Request, gen: _Generation, fault: tuple[str, str] | None
    ) -> web.StreamResponse:
        name, arg = fault if fault else ("", "")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        if name == "close_after_stream":
            resp.headers["Connection"] = "keep-alive"
        await resp.prepare(request)
        if name == "hang":
            await asyncio.sleep(HANG_S)
        if gen.chat:
            await resp.write(_sse(gen.chunk({"role": "assistant", "content": ""}, None)))
        half = gen.n_tokens // 2
        delay = self.opts.token_delay_ms / 1000.0
        emitted = 0
        for i in range(gen.n_tokens):
            await asyncio.sleep(delay)
            if i == half:
                if name == "truncate":
                    await resp.write_eof()
                    return resp
                if name == "reset":
                    _reset_connection(request)
                    raise asyncio.CancelledError
                if name == "short":
                    break
                if name == "malformed_json":
                    await resp.write(b"data: {this is not json\n\n")
                if name == "invalid_utf8":
                    await resp.write(b'data: {"choices":[{"index":0,"text":"\xff\xfe bad"}]}\n\n')
                if name == "error_object":
                    code = int(arg) if arg else 500
                    err = {"message": "simulated engine failure mid-stream", "type": "server_error", "code": code}
                    await resp.write(_sse({"error": err}))
                    await resp.write(b"data: [DONE]\n\n")
                    await resp.write_eof()
                    return resp
            if name == "empty_choices":
                await resp.write(_sse(gen.envelope([])))
            else:
                last = i == gen.n_tokens - 1
                finish = None if not last else ("length" if gen.n_tokens == gen.max_tokens else "stop")
                await resp.write(_sse(gen.chunk(gen.token_text(i), finish)))
            emitted += 1
        if name == "short":
            await resp.write(_sse(gen.chunk("", "stop")))
        if (gen.body.get("stream_options") or {}).get("include_usage"):
            await resp.write(_sse(gen.envelope([], usage=gen.usage(emitted))))
        await resp.write(b"data: [DONE]\n\n")
        if name == "hang_after_done":
            await asyncio.sleep(HANG_S)
        if name == "reset_after_done":
            await resp.drain()
            await asyncio.sleep(0.05)  # let [DONE] reach the client before the RST overtakes it
            _reset_connection(request)
            raise asyncio.CancelledError
        await resp.write_eof()
        if name == "close_after_stream" and request.transport is not None:
            self.dead_connections.add(request.transport)
        if not name:
            self.stats.requests_served += 1
        return resp


class _Generation:
    """The shape of one answer: ids, chunk envelopes, token texts and usage."""

    def __init__(
        self,
        chat: bool,
        model: str,
        prompt: str,
        prompt_tokens: int,
        n_tokens: int,
        max_tokens: int,
        body: dict[str, Any],
        serial: int,
    ) -> None:
        self.chat = chat
        self.model = model
        self.prompt = prompt
        self.prompt_tokens = prompt_tokens
        self.n_tokens = n_tokens
        self.max_tokens = max_tokens
        self.body = body
        self.created = int(time.time())
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{serial}"

    def token_text(self, index: int) -> str:
        text = " tok"
        if index == 0 and not self.chat and self.body.get("echo"):
            return self.prompt + text
        return text

    def envelope(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        obj: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created, "model": self.model}
        obj["choices"] = choices
        if usage is not None:
            obj["usage"] = usage
        return obj

    def chunk(self, content: str | dict[str, str], finish: str | None) -> dict[str, Any]:
        if self.chat:
            delta = content if isinstance(content, dict) else {"content": content}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": finish}
        return self.envelope([choice])

    def usage(self, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }

    def whole(self) -> dict[str, Any]:
        text = "".join(self.token_text(i) for i in range(self.n_tokens))
        finish = "length" if self.n_tokens == self.max_tokens else "stop"
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            kind = "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(self.n_tokens),
        }


def _reset_connection(request: web.Request) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), as a crashed server or a proxy would."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _parse_rate(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--fault-rate wants NAME=P, got {text!r}")
    parse_fault(name)
    rate = float(value)
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"--fault-rate probability must be in [0, 1], got {value}")
    return name, rate


def parse_args(argv: list[str] | None = None) -> tuple[str, int, int, Options]:
    p = argparse.ArgumentParser(prog="python -m tests.servers.slot_server", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--backlog", type=int, default=2048)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--token-delay-ms", type=float, default=5.0)
    p.add_argument("--prefill-ms-per-token", type=float, default=0.02)
    p.add_argument("--fault", default=None, help="; ".join(f"{k}: {v}" for k, v in FAULTS.items()))
    p.add_argument("--fault-rate", type=_parse_rate, action="append", default=[], metavar="NAME=P")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-key", default=None)
    p.add_argument("--eos-after", type=int, default=None)
    p.add_argument("--model", default="slot-model")
    p.add_argument("--no-models", action="store_true", help="serve no /v1/models listing")
    a = p.parse_args(argv)
    if a.fault is not None:
        try:
            parse_fault(a.fault)
        except ValueError as exc:
            p.error(str(exc))
    if a.slots < 1:
        p.error("--slots must be at least 1")
    if sum(rate for _, rate in a.fault_rate) > 1.0:
        p.error("--fault-rate probabilities add up to more than 1")
    opts = Options(
        slots=a.slots,
        token_delay_ms=a.token_delay_ms,
        prefill_ms_per_token=a.prefill_ms_per_token,
        fault=a.fault,
        fault_rates=dict(a.fault_rate),
        seed=a.seed,
        api_key=a.api_key,
        eos_after=a.eos_after,
        model=a.model,
        no_models=a.no_models,
    )
    return a.host, a.port, a.backlog, opts


async def serve(host: str, port: int, backlog: int, opts: Options) -> None:
    server = SlotServer(opts)
    # handler_cancellation: a client that gives up (timeout, reset) frees its slot at once.
    runner = web.AppRunner(server.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=backlog)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    host, port, backlog, opts = parse_args(argv)
    asyncio.run(serve(host, port, backlog, opts))


if __name__ == "__main__":
    main(sys.argv[1:])
