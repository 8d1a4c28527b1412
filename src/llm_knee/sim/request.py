"""A request as the simulated engine sees it: what was asked, and where it stands."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from enum import IntEnum


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What a client asks for: lengths in tokens, a priority (lower is served first, as in vLLM), and
    optionally whether its shared prefix is a cache hit (None: drawn from the engine's hit rate)."""

    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    prefix_hit: bool | None = None


class State(IntEnum):
    WAITING = 0
    PREFILL = 1  # admitted, prompt (or recompute) not fully computed yet
    DECODE = 2  # one token per step; its counters are kept lazily, see SimRequest
    FINISHED = 3
    ABORTED = 4


class SimRequest:
    """Mutable engine-side state of one request.

    While DECODE, ``computed`` and ``generated`` are *not* updated every step (that would cost O(batch)
    Python work per step). Instead the request remembers the step index ``s0`` at which it entered the
    decode phase and its counters then (``c0``, ``g0``); after step ``k`` it has computed
    ``c0 + (k - s0 + 1)`` tokens. ``Engine`` materialises the counters when the request leaves DECODE.
    """

    __slots__ = (
        "arrival_ns",
        "c0",
        "computed",
        "finish_step",
        "first_token_ns",
        "g0",
        "generated",
        "held_blocks",
        "hit_blocks",
        "hit_tokens",
        "id",
        "output",
        "payload",
        "preemptions",
        "priority",
        "prompt",
        "s0",
        "seqno",
        "state",
        "times",
    )

    def __init__(self, request_id: str, seqno: int, spec: RequestSpec, arrival_ns: int) -> None:
        self.id = request_id
        self.seqno = seqno  # arrival order; ties in priority are broken by it
        self.arrival_ns = arrival_ns
        self.prompt = spec.prompt_tokens
        self.output = spec.output_tokens
        self.priority = spec.priority
        self.hit_tokens = 0  # prompt tokens served from the prefix cache (no compute)
        self.hit_blocks = 0  # blocks of those tokens, held by the shared prefix, not by this request
        self.state = State.WAITING
        self.computed = 0  # tokens whose KV is in the cache
        self.generated = 0  # output tokens sampled so far
        self.held_blocks = 0  # KV blocks owned by this request (PREFILL state; DECODE derives it)
        self.s0 = 0
        self.c0 = 0
        self.g0 = 0
        self.finish_step = -1
        self.first_token_ns = -1
        self.times = array("q")  # simulated ns of every output token, in order
        self.preemptions = 0
        self.payload: object = None  # owner's handle (serve-sim keeps its stream here)

    @property
    def total_tokens(self) -> int:
        return self.prompt + self.output

    def __repr__(self) -> str:
        return (
            f"SimRequest({self.id!r}, state={self.state.name}, prompt={self.prompt}, output={self.output}, "
            f"computed={self.computed}, generated={self.generated})"
        )
