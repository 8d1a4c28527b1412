"""The engine model: continuous batching with vLLM's scheduling rules, timed by a step-time model.

One step = one forward pass. ``begin_step(now)`` decides what runs (decodes first, then running
prefill chunks, then new admissions while the token budget, ``max_num_seqs`` and KV blocks allow) and
returns how long the step takes; ``end_step()`` applies it and says which requests produced a token or
finished. Both the discrete-event simulation (``sim.runs``) and the real-time server (``sim.realtime``)
drive the engine through these two calls.

Cost per step is O(1) for decoding requests plus O(prefill chunks): decoding requests are tracked by
running sums (how many decode, their total context, how many cross a KV-block boundary this step) and a
bucket of the step each one finishes at; their counters are materialised only when they leave decode
(finish, preemption, abort). This is what lets an hour of saturated traffic simulate in seconds.

Scheduling follows vLLM's V1 scheduler with one simplification: all decodes are served before any
prefill chunk (V1 serves running requests in list order, which is the same whenever prefills were
admitted after the decodes, the usual case).
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass, field

from llm_knee.sim.config import EngineConfig, KvExhaustedError, StepTimeModelLike
from llm_knee.sim.kvcache import BlockPool
from llm_knee.sim.request import RequestSpec, SimRequest, State
from llm_knee.sim.scheduler import SCHEDULING_POLICIES


@dataclass(slots=True)
class StepTrace:
    """What one step did (kept only when the engine is given a trace list: tests and debugging)."""

    index: int
    start_ns: int
    end_ns: int
    n_running: int
    n_decode: int
    n_prefill_seqs: int
    n_prefill_tokens: int
    kv_used_blocks: int


@dataclass(slots=True)
class StepOutcome:
    index: int
    start_ns: int
    end_ns: int
    finished: list[SimRequest] = field(default_factory=list)
    prefill_done: list[SimRequest] = field(default_factory=list)  # prefill (or recompute) done: 1 token
    decoded: list[SimRequest] | None = None  # requests that decoded one token (only with track_tokens)


class Engine:
    def __init__(
        self,
        step_model: StepTimeModelLike,
        config: EngineConfig | None = None,
        *,
        max_context: int,
        kv_capacity_tokens: int | None = None,
        seed: int = 0,
        track_tokens: bool = False,
        trace: list[StepTrace] | None = None,
    ) -> None:
        """``max_context``: the model's maximum context (``ModelSpec.max_context``).
        ``kv_capacity_tokens``: override the KV capacity the step model derives from
        ``gpu_memory_utilization``. ``track_tokens``: list the decoding requests in every StepOutcome
        (the real-time server needs them; the simulation does not)."""
        cfg = config or EngineConfig()
        cfg.validate()
        if max_context < 2:
            raise ValueError(f"max_context must be at least 2 (got {max_context})")
        self.config = cfg
        self.model = step_model
        self.max_len = min(max_context, cfg.max_model_len or max_context)
        capacity = (
            kv_capacity_tokens
            if kv_capacity_tokens is not None
            else step_model.kv_capacity_tokens(cfg.gpu_memory_utilization, cfg.max_num_batched_tokens)
        )
        bs = cfg.block_size
        if capacity < bs:
            raise ValueError(f"KV capacity of {capacity} tokens is less than one block of {bs} tokens")
        self.pool = BlockPool(capacity // bs, bs)
        self.block_size = bs
        self.prefix_blocks = cfg.shared_prefix_tokens // bs if cfg.enable_prefix_caching else 0
        if self.prefix_blocks >= self.pool.total:
            raise ValueError(
                f"shared_prefix_tokens ({cfg.shared_prefix_tokens}) fills the whole KV cache "
                f"({self.pool.total * bs} tokens)"
            )
        self.policy = SCHEDULING_POLICIES[cfg.scheduling_policy]()
        self._rng = random.Random(seed)
        self._track = track_tokens
        self.trace = trace
        self.running: dict[str, SimRequest] = {}  # admission order (the FCFS preemption order)
        self.prefilling: dict[str, SimRequest] = {}
        self.decoding: dict[str, SimRequest] = {}
        self.live: dict[str, SimRequest] = {}  # every waiting or running request
        # Lazy decode bookkeeping (see SimRequest): count, sum of (context + 1), block-crossing phases.
        self.n_decode = 0
        self.decode_kv = 0
        self._phase = [0] * bs
        self._finish_at: dict[int, list[SimRequest]] = {}
        self.step_ends = array("q")  # end time of step (step_base + i), ns
        self.step_base = 0  # steps before this are dropped once no decoding request needs them
        self.k = 0  # index of the next step
        self._in_step = False
        self._decode_allocated = False  # this step's decode blocks are already counted in pool.used
        self._chunks: list[tuple[SimRequest, int]] = []
        self._step_start = 0
        self._step_end = 0
        self._step_decoded: list[SimRequest] | None = None
        self._aborts: list[SimRequest] = []
        self._seqno = 0
        self.num_preemptions = 0
        self.prompt_tokens_total = 0  # prompt tokens of requests whose first prefill completed
        self.generation_tokens_total = 0  # output tokens of finished or preempted/aborted requests

    # ------------------------------------------------------------------ requests in
    def validate(self, spec: RequestSpec) -> None:
        """Raise ValueError when the request could never be served by this engine."""
        if spec.prompt_tokens <= 0 or spec.output_tokens <= 0:
            raise ValueError(
                f"prompt and output lengths must be positive (got prompt={spec.prompt_tokens}, "
                f"output={spec.output_tokens})"
            )
        total = spec.prompt_tokens + spec.output_tokens
        if total > self.max_len:
            raise ValueError(
                f"prompt ({spec.prompt_tokens}) + output ({spec.output_tokens}) = {total} tokens exceeds the "
                f"maximum context of {self.max_len} tokens; shorten the request or raise max_model_len "
                "(up to the model's own limit)"
            )
        cfg = self.config
        if not cfg.enable_chunked_prefill and spec.prompt_tokens > cfg.max_num_batched_tokens:
            raise ValueError(
                f"a {spec.prompt_tokens}-token prompt can never schedule: max_num_batched_tokens is "
                f"{cfg.max_num_batched_tokens} and chunked prefill is off; enable chunked prefill or raise "
                "max_num_batched_tokens to at least the prompt length"
            )
        hit_blocks = self._hit_tokens(spec.prompt_tokens) // self.block_size
        need = self.pool.blocks_for(total - 1) - hit_blocks + self.prefix_blocks
        if need > self.pool.total:
            raise ValueError(
                f"a request of {total} tokens needs {need} KV blocks but the whole cache holds "
                f"{self.pool.total} ({self.pool.total * self.block_size} tokens); shorten it, raise "
                "gpu_memory_utilization, quantize the KV cache or add GPUs"
            )

    def _hit_tokens(self, prompt: int) -> int:
        if not self.prefix_blocks:
            return 0
        # The last prompt token is always computed (its logits give the first output token), and
        # only whole blocks are cached.
        usable = min(self.config.shared_prefix_tokens, prompt - 1)
        return (usable // self.block_size) * self.block_size

    def add_request(
        self, spec: RequestSpec, now_ns: int, request_id: str | None = None, payload: object = None
    ) -> SimRequest:
        self.validate(spec)
        seqno = self._seqno
        self._seqno += 1
        rid = request_id if request_id is not None else f"sim-{seqno}"
        if rid in self.live:
            raise ValueError(f"request id {rid!r} is already in the engine")
        req = SimRequest(rid, seqno, spec, now_ns)
        req.payload = payload
        if self.prefix_blocks:
            hit = spec.prefix_hit if spec.prefix_hit is not None else self._rng.random() < self.config.prefix_hit_rate
            if hit:
                req.hit_tokens = self._hit_tokens(spec.prompt_tokens)
                req.hit_blocks = req.hit_tokens // self.block_size
        self.live[rid] = req
        self.policy.push(req)
        return req

    def abort(self, request_id: str) -> bool:
        """Drop a request (its client went away). Takes effect now, or at the end of the step in flight."""
        req = self.live.get(request_id)
        if req is None:
            return False
        if req.state is State.WAITING:
            self.policy.remove(req)
            self._retire(req, State.ABORTED)
        elif self._in_step:
            self._aborts.append(req)
        else:
            self._leave_running(req)
            self._retire(req, State.ABORTED)
        return True

    # ------------------------------------------------------------------ state
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.policy)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    @property
    def has_work(self) -> bool:
        return bool(self.running) or len(self.policy) > 0

    @property
    def in_step(self) -> bool:
        return self._in_step

    def token_times(self, req: SimRequest) -> list[int]:
        """Simulated times of the tokens ``req`` has produced so far (materialises lazy decode)."""
        if req.state is State.DECODE:
            b = self.step_base
            return req.times.tolist() + self.step_ends[req.s0 - b : self.k - b].tolist()
        return req.times.tolist()

    def generated(self, req: SimRequest) -> int:
        if req.state is State.DECODE:
            return req.g0 + (self.k - req.s0)
        return req.generated

    # ------------------------------------------------------------------ one step
    def begin_step(self, now_ns: int) -> int | None:
        """Schedule the next step starting at ``now_ns``; return its duration in ns (None: idle)."""
        if self._in_step:
            raise RuntimeError("begin_step called while a step is in flight")
        pool = self.pool
        bs = self.block_size
        k = self.k
        preempted = False
        # 1. Every decoding request gets its token; those crossing a block boundary need a block.
        need = self._phase[k % bs]
        while need > pool.total - pool.used:
            self._preempt(self.policy.victim(self.running), "decode")
            preempted = True
            need = self._phase[k % bs]
        pool.used += need
        self._decode_allocated = True
        budget = self.config.max_num_batched_tokens - self.n_decode
        chunks: list[tuple[SimRequest, int]] = []
        # 2. Requests part-way through a (chunked) prefill or recompute, in admission order.
        if self.prefilling:
            for req in list(self.prefilling.values()):
                if budget <= 0:
                    break
                if req.state is not State.PREFILL:
                    continue  # preempted a moment ago to make room for an earlier one
                n = min(req.prompt + req.generated - req.computed, budget)
                blocks = pool.blocks_for(req.computed + n) - req.hit_blocks
                while blocks - req.held_blocks > pool.total - pool.used:
                    victim = self.policy.victim(self.running)
                    self._preempt(victim, "prefill")
                    preempted = True
                    if victim is req:
                        break
                if req.state is not State.PREFILL:
                    continue
                pool.used += blocks - req.held_blocks
                req.held_blocks = blocks
                chunks.append((req, n))
                budget -= n
        # 3. New admissions, only in a step that preempted nobody (vLLM V1).
        if preempted:
            # A priority victim may be a request whose chunk was already placed in this step.
            chunks = [(req, n) for req, n in chunks if req.state is State.PREFILL]
        else:
            self._admit(chunks, budget, now_ns)
        if not chunks and not self.n_decode:
            self._decode_allocated = False
            head = self.policy.peek()
            if head is not None and head.arrival_ns <= now_ns:
                raise RuntimeError(
                    f"scheduler stalled: {self.num_waiting} waiting, nothing running, "
                    f"{pool.free}/{pool.total} KV blocks free (an engine bug: validation should prevent it)"
                )
            return None
        n_pref = 0
        pairs = 0.0
        for req, n in chunks:
            n_pref += n
            pairs += n * (req.computed + n / 2)
        dur = round(self.model.step_time_s(n_pref, pairs, self.n_decode, self.decode_kv) * 1e9)
        if dur < 1:
            dur = 1
        self._chunks = chunks
        self._step_start = now_ns
        self._step_end = now_ns + dur
        self._step_decoded = list(self.decoding.values()) if self._track else None
        self._in_step = True
        if self.trace is not None:
            self.trace.append(
                StepTrace(k, now_ns, now_ns + dur, len(self.running), self.n_decode, len(chunks), n_pref, pool.used)
            )
        return dur

    def _admit(self, chunks: list[tuple[SimRequest, int]], budget: int, now_ns: int) -> None:
        cfg = self.config
        pool = self.pool
        policy = self.policy
        while budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = policy.peek()
            if req is None or req.arrival_ns > now_ns:
                # (Real time only: a step starting at the previous step's end may predate an arrival.)
                break
            start = req.hit_tokens
            remaining = req.prompt + req.generated - start
            # Without chunked prefill a prompt goes whole; a recompute longer than the whole budget
            # is still split (it could never run otherwise), as vLLM V1 does.
            whole = (not cfg.enable_chunked_prefill) and remaining <= cfg.max_num_batched_tokens
            if whole and remaining > budget:
                break
            n = min(remaining, budget)
            blocks = pool.blocks_for(start + n) - req.hit_blocks
            extra = pool.prefix_cost(self.prefix_blocks) if req.hit_blocks else 0
            if blocks + extra > pool.total - pool.used:
                break
            policy.pop()
            if req.hit_blocks:
                pool.acquire_prefix(self.prefix_blocks)
            pool.used += blocks
            req.held_blocks = blocks
            req.computed = start
            req.state = State.PREFILL
            self.running[req.id] = req
            self.prefilling[req.id] = req
            chunks.append((req, n))
            budget -= n

    def end_step(self) -> StepOutcome:
        """Apply the step in flight at its end time; return who produced tokens and who finished."""
        if not self._in_step:
            raise RuntimeError("end_step called with no step in flight")
        k = self.k
        t = self._step_end
        self.step_ends.append(t)
        out = StepOutcome(k, self._step_start, t, decoded=self._step_decoded)
        finished = out.finished
        self.decode_kv += self.n_decode
        done = self._finish_at.pop(k, None)
        if done:
            for req in done:
                if req.state is not State.DECODE or req.finish_step != k:
                    continue  # left decode earlier (preempted or aborted); stale bucket entry
                c = req.c0 + (k - req.s0) + 1
                req.times.extend(self.step_ends[req.s0 - self.step_base : k + 1 - self.step_base])
                req.computed = c
                req.generated = req.output
                self._drop_decode(req, c)
                self._leave_running_common(req, self.pool.blocks_for(c) - req.hit_blocks)
                finished.append(req)
        for req, n in self._chunks:
            if req.state is not State.PREFILL:
                continue
            req.computed += n
            if req.computed < req.prompt + req.generated:
                continue
            del self.prefilling[req.id]
            if req.generated == 0:
                self.prompt_tokens_total += req.prompt
                req.first_token_ns = t
            req.generated += 1
            req.times.append(t)
            out.prefill_done.append(req)
            if req.generated >= req.output:
                self._leave_running_common(req, req.held_blocks)
                finished.append(req)
                continue
            req.state = State.DECODE
            req.s0 = k + 1
            req.c0 = req.computed
            req.g0 = req.generated
            req.finish_step = k + req.output - req.generated
            self.n_decode += 1
            self.decode_kv += req.c0 + 1
            self._phase[(req.s0 - req.c0) % self.block_size] += 1
            self.decoding[req.id] = req
            bucket = self._finish_at.get(req.finish_step)
            if bucket is None:
                self._finish_at[req.finish_step] = [req]
            else:
                bucket.append(req)
        self.k = k + 1
        if not self.k & 0xFFFF:
            self._trim_step_ends()
        self._in_step = False
        self._decode_allocated = False
        self._chunks = []
        for req in finished:
            self._retire(req, State.FINISHED)
        if self._aborts:
            for req in self._aborts:
                if req.state in (State.PREFILL, State.DECODE):
                    self._leave_running(req)
                    self._retire(req, State.ABORTED)
                elif req.state is State.WAITING and self.policy.remove(req):
                    self._retire(req, State.ABORTED)
            self._aborts.clear()
        return out

    def _trim_step_ends(self) -> None:
        """Forget step end times no decoding request will read (a long-lived server would grow forever)."""
        keep_from = min((req.s0 for req in self.decoding.values()), default=self.k)
        drop = keep_from - self.step_base
        if drop > 0:
            del self.step_ends[:drop]
            self.step_base = keep_from

    # ------------------------------------------------------------------ leaving the running set
    def _drop_decode(self, req: SimRequest, computed: int) -> None:
        """Take a decoding request out of the running sums; ``computed`` = its context as counted now."""
        self.n_decode -= 1
        self.decode_kv -= computed + 1
        self._phase[(req.s0 - req.c0) % self.block_size] -= 1
        del self.decoding[req.id]

    def _leave_running(self, req: SimRequest) -> None:
        """Materialise ``req``'s counters between steps (or while building one) and free its blocks."""
        if req.state is State.DECODE:
            j = self.k - req.s0  # decode steps completed
            c = req.c0 + j
            req.times.extend(self.step_ends[req.s0 - self.step_base : self.k - self.step_base])
            req.computed = c
            req.generated = req.g0 + j
            self._drop_decode(req, c)
            # While a step is being built, this step's block for it is already counted.
            held = self.pool.blocks_for(c + 1 if self._decode_allocated else c) - req.hit_blocks
        else:
            self.prefilling.pop(req.id, None)
            held = req.held_blocks
        self._leave_running_common(req, held)

    def _leave_running_common(self, req: SimRequest, held_blocks: int) -> None:
        self.pool.release(held_blocks)
        req.held_blocks = 0
        if req.hit_blocks:
            self.pool.release_prefix()
        del self.running[req.id]

    def _preempt(self, req: SimRequest, phase: str) -> None:
        if self.config.on_kv_exhausted == "crash":
            raise KvExhaustedError(
                f"KV cache exhausted while scheduling {phase}: {self.pool.used}/{self.pool.total} blocks of "
                f"{self.block_size} tokens in use by {len(self.running)} running requests"
            )
        self._leave_running(req)
        req.state = State.WAITING
        req.computed = 0
        req.preemptions += 1
        self.num_preemptions += 1
        self.policy.push_preempted(req)

    def _retire(self, req: SimRequest, state: State) -> None:
        self.generation_tokens_total += req.generated
        req.state = state
        del self.live[req.id]

    # ------------------------------------------------------------------ checks
    def check_invariants(self) -> None:
        """Recompute the running sums from scratch and compare (tests call this between steps)."""
        if self._in_step:
            raise RuntimeError("check_invariants must be called between steps")
        bs = self.block_size
        used = self.pool.prefix_blocks_held
        kv = 0
        phase = [0] * bs
        for req in self.running.values():
            if req.state is State.DECODE:
                c = req.c0 + (self.k - req.s0)
                used += self.pool.blocks_for(c) - req.hit_blocks
                kv += c + 1
                phase[(req.s0 - req.c0) % bs] += 1
            elif req.state is State.PREFILL:
                used += req.held_blocks
            else:
                raise AssertionError(f"{req!r} is in the running set")
        problems = []
        if used != self.pool.used:
            problems.append(f"KV blocks: counted {self.pool.used}, held {used}")
        if self.pool.used > self.pool.total:
            problems.append(f"KV blocks over capacity: {self.pool.used} > {self.pool.total}")
        if kv != self.decode_kv:
            problems.append(f"decode KV sum: running {self.decode_kv}, actual {kv}")
        if phase != self._phase:
            problems.append("block-crossing phase counts out of step")
        if self.n_decode != len(self.decoding):
            problems.append(f"n_decode {self.n_decode} != {len(self.decoding)} decoding")
        if len(self.running) > self.config.max_num_seqs:
            problems.append(f"{len(self.running)} running > max_num_seqs {self.config.max_num_seqs}")
        if problems:
            raise AssertionError("; ".join(problems))
