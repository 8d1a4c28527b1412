"""Speed side of a plan: steady-state step times up the concurrency ladder, prefill, TTFT, E2E, the knee.

Closed loop at concurrency c, requests of I prompt and O output tokens (the means, rounded to whole
tokens). Each user's cycle is one step that prefills its prompt (and yields its first token) plus O - 1
decode steps, so over one cycle of O engine steps the c prefills are spread evenly:

    q, r = divmod(c, O): r steps hold q + 1 prefills, O - r steps hold q; the others in a step decode
    step(k)    = roofline step (roofline.py) with k x I prefill tokens, k x I^2/2 attention pairs and
                 c - k decoding sequences reading round((c - k) x ctx) KV tokens, ctx = I + O/2
                 (the step producing output token j attends over I + j - 1 tokens, j = 2..O: mean I + O/2)
    E2E(c)     = cycle = r x step(q + 1) + (O - r) x step(q)
    TTFT(c)    = step(ceil(c / O))                      (the step holding the user's own prefill)
    TPOT(c)    = (E2E - TTFT) / (O - 1);  tok/s per user = 1 / TPOT
    QPS(c)     = c / E2E(c)                              (Little's law)

"Decode step" in the ladder is the pure decode step (no prefill in it); the per-user speed uses the
steady-state steps above, because other users' prefills interrupt every decode (at c ~ O there is about
one prefill in every step, which can double the step time of a pure decode). Not modelled: queueing for
a step to start (up to one step of TTFT) and lock-step waves of users; the simulator (--simulate) has both.

Predicted knee = the smallest of: the memory limit; the last concurrency whose per-user speed meets the
tok/s target; the first concurrency where the steps turn compute-bound; and, when given, the last
concurrency meeting the TTFT or E2E limit. "Compute-bound" means the weight matmuls: over a cycle their
FLOPs time reaches the time to read the weights (the ridge point). Below it a step's weights are read once
for the whole batch and one more user costs little; past it every user adds its own FLOPs, so total
tokens/s flattens. Attention stays bandwidth-bound at any batch (each sequence reads its own KV), which is
why roofline.StepBreakdown.bound (the sum of both sides) rarely flips for long contexts. Every criterion
is monotonic in c (step times never fall as c grows; MoE weight reads are concave in the batch), so each
is found by bisection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llm_knee.plan.explain import Figure, num
from llm_knee.plan.inputs import Lengths, PlanSlo
from llm_knee.plan.roofline import StepBreakdown, StepTimeModel


@dataclass(frozen=True)
class StepTerms:
    """One kind of engine step in the cycle: `prefills` prompts and `decoders` decoding sequences."""

    prefills: int
    decoders: int
    count: int  # how many steps of this kind per cycle of O steps
    weights_read_s: float
    linear_compute_s: float
    kv_traffic_s: float
    attention_compute_s: float
    overhead_s: float
    allreduce_s: float
    total_s: float

    @classmethod
    def of(cls, b: StepBreakdown, prefills: int, decoders: int, count: int) -> StepTerms:
        return cls(
            prefills, decoders, count, b.weights_read_s, b.linear_compute_s, b.kv_traffic_s,
            b.attention_compute_s, b.overhead_s, b.allreduce_s, b.total_s,
        )  # fmt: skip

    def formula(self) -> str:
        return (
            f"{self.count} steps x [{self.prefills} prefill(s) + {self.decoders} decoders: "
            f"max({num(self.weights_read_s)}, {num(self.linear_compute_s)}) + max({num(self.kv_traffic_s)}, "
            f"{num(self.attention_compute_s)}) + {num(self.overhead_s)} + {num(self.allreduce_s)} "
            f"= {num(self.total_s)} s]"
        )


@dataclass(frozen=True)
class LadderRow:
    """One concurrency level. The *_s breakdown terms are means per step over a cycle."""

    concurrency: int
    decode_step_s: float  # a pure decode step of c sequences (no prefill in it)
    mean_step_s: float  # mean step over a cycle, prefills included
    tpot_s: float
    tok_s_per_user: float
    tok_s_total: float  # output tokens/s of the replica
    bound: str  # "bandwidth", "compute (matmuls)" (attention still bandwidth-bound) or "compute"
    weights_read_s: float
    kv_traffic_s: float
    linear_compute_s: float
    attention_compute_s: float
    overhead_s: float
    allreduce_s: float
    ttft_s: float
    e2e_s: float
    qps: float
    bandwidth_bound_tok_s_per_user: float  # pure decode, bytes only: 1 / ((weights + KV) / (bandwidth x e))
    steps: tuple[StepTerms, ...]  # the step kinds of one cycle


@dataclass(frozen=True)
class KneeCandidate:
    name: str  # memory | tok_s_per_user | compute_bound | ttft | e2e
    concurrency: int | None  # None: does not bind anywhere up to the memory limit
    reason: str
    evidence: str = ""  # the values on both sides of the boundary


@dataclass(frozen=True)
class SpeedPlan:
    input_tokens: float
    output_tokens: float
    decode_context_tokens: float
    prefill_tokens: int
    output_tokens_int: int
    prefill_time_s: float
    max_num_batched_tokens: int
    tok_s_target: float
    effective_bandwidth_bytes_s: float
    effective_peak_flops: float
    roofline_inputs: str
    ladder: tuple[LadderRow, ...]
    candidates: tuple[KneeCandidate, ...]
    predicted_knee: int  # 0: no concurrency meets the targets
    binding: tuple[str, ...]
    at_knee: LadderRow | None

    def figures(self) -> list[Figure]:
        figs = [
            Figure(
                "effective_bandwidth_bytes_s",
                "Achieved memory bandwidth per GPU",
                self.effective_bandwidth_bytes_s,
                "B/s",
                "spec bandwidth x achieved fraction",
                self.roofline_inputs,
            ),
            Figure(
                "effective_peak_flops",
                "Achieved dense tensor FLOP/s per GPU (decode)",
                self.effective_peak_flops,
                "FLOP/s",
                "peak of the weight dtype's compute class (FP8 peak for fp8 on cards with FP8, else 16-bit) x MFU",
                self.roofline_inputs,
            ),
            Figure(
                "decode_context_tokens",
                "Mean KV context while decoding",
                self.decode_context_tokens,
                "tokens",
                "I + O / 2 (I, O: mean lengths rounded to whole tokens)",
                f"{self.prefill_tokens} + {self.output_tokens_int} / 2",
            ),
            Figure(
                "prefill_time_s",
                "Prefill of one prompt (alone)",
                self.prefill_time_s,
                "s",
                "sum over chunks of max(weights read, prompt FLOPs) + max(KV write, attention FLOPs) + overheads",
                f"prompt {self.prefill_tokens} tokens in chunks of {self.max_num_batched_tokens} (roofline.py)",
            ),
        ]
        for c in self.candidates:
            figs.append(
                Figure(f"knee_candidate_{c.name}", f"Knee candidate: {c.name}", c.concurrency, "", c.reason, c.evidence)
            )
        figs.append(
            Figure(
                "predicted_knee",
                "Predicted knee",
                self.predicted_knee,
                "concurrent requests",
                "min(candidates)",
                ", ".join(f"{c.name}={c.concurrency}" for c in self.candidates if c.concurrency is not None)
                + f" -> bound by {', '.join(self.binding)}",
            )
        )
        k = self.at_knee
        if k is None:
            return figs
        o = self.output_tokens_int
        figs += [
            Figure(
                "e2e_s_at_knee",
                "E2E at the knee (one cycle of O steps)",
                k.e2e_s,
                "s",
                "r x step(q + 1) + (O - r) x step(q), q, r = divmod(c, O); step = max(weights read, matmul "
                "FLOPs) + max(KV read+write, attention FLOPs) + overheads + all-reduce",
                f"divmod({k.concurrency}, {o}); " + " + ".join(t.formula() for t in k.steps),
            ),
            Figure(
                "ttft_s_at_knee",
                "TTFT at the knee",
                k.ttft_s,
                "s",
                "step(ceil(c / O)): the step holding the user's own prefill",
                f"ceil({k.concurrency} / {o}) prompt(s) of {self.prefill_tokens} tokens beside the other decoders",
            ),
            Figure(
                "tok_s_per_user_at_knee",
                "Per-user decode speed at the knee",
                k.tok_s_per_user,
                "tok/s",
                "1 / TPOT, TPOT = (E2E - TTFT) / (O - 1)",
                f"1 / (({num(k.e2e_s)} - {num(k.ttft_s)}) / ({o} - 1))",
            ),
            Figure(
                "mean_step_s_at_knee",
                "Mean engine step at the knee (prefills included)",
                k.mean_step_s,
                "s",
                "E2E / O",
                f"{num(k.e2e_s)} / {o}",
            ),
            Figure(
                "decode_step_s_at_knee",
                "Pure decode step at the knee (no prefill)",
                k.decode_step_s,
                "s",
                "roofline step with c decoding sequences of ctx tokens",
                f"c = {k.concurrency}, ctx = {num(self.decode_context_tokens)}",
            ),
        ]
        return figs


def _bound_words(matmuls: bool, attention: bool) -> str:
    if matmuls and attention:
        return "compute"
    if matmuls:
        return "compute (matmuls)"
    if attention:
        return "compute (attention)"
    return "bandwidth"


class Curves:
    """Steady-state step, TTFT and E2E as functions of concurrency for one model, GPU and request mix."""

    def __init__(self, stm: StepTimeModel, lengths: Lengths) -> None:
        self.stm = stm
        self.input = lengths.input_mean
        self.output = lengths.output_mean
        # Token counts are whole numbers: a request of the mean lengths, rounded to the nearest token.
        self.prompt = max(1, round(self.input))
        self.out = max(1, round(self.output))
        self.ctx = self.prompt + self.out / 2.0

    def step(self, prefills: int, decoders: int) -> StepBreakdown:
        p = self.prompt
        return self.stm.breakdown(prefills * p, prefills * p * p / 2.0, decoders, round(decoders * self.ctx))

    def decode_only(self, c: int) -> StepBreakdown:
        return self.step(0, c)

    def cycle(self, c: int) -> tuple[StepTerms, ...]:
        """The step kinds of one cycle of O steps: O - r with q prefills, r with q + 1 (q, r = divmod(c, O))."""
        q, r = divmod(c, self.out)
        kinds = [StepTerms.of(self.step(q, c - q), q, c - q, self.out - r)]
        if r:
            kinds.append(StepTerms.of(self.step(q + 1, c - q - 1), q + 1, c - q - 1, r))
        return tuple(k for k in kinds if k.count > 0)

    def e2e(self, c: int) -> float:
        return sum(k.count * k.total_s for k in self.cycle(c))

    def ttft(self, c: int) -> float:
        k = -(-c // self.out)
        return self.step(k, c - k).total_s

    def tpot(self, c: int) -> float:
        e2e = self.e2e(c)
        if self.out == 1:
            return e2e
        return (e2e - self.ttft(c)) / (self.out - 1)

    def matmuls_compute_bound(self, c: int) -> bool:
        kinds = self.cycle(c)
        return sum(k.count * k.linear_compute_s for k in kinds) >= sum(k.count * k.weights_read_s for k in kinds)

    def row(self, c: int) -> LadderRow:
        kinds = self.cycle(c)

        def mean(term: str) -> float:
            return float(sum(getattr(k, term) * k.count for k in kinds)) / self.out

        ttft = self.ttft(c)
        e2e = sum(k.count * k.total_s for k in kinds)
        tpot = e2e if self.out == 1 else (e2e - ttft) / (self.out - 1)
        lin, w = mean("linear_compute_s"), mean("weights_read_s")
        att, kv = mean("attention_compute_s"), mean("kv_traffic_s")
        decode = self.decode_only(c)
        return LadderRow(
            concurrency=c,
            decode_step_s=decode.total_s,
            mean_step_s=e2e / self.out,
            tpot_s=tpot,
            tok_s_per_user=1.0 / tpot,
            tok_s_total=c * self.out / e2e,
            bound=_bound_words(lin >= w, att >= kv),
            weights_read_s=w,
            kv_traffic_s=kv,
            linear_compute_s=lin,
            attention_compute_s=att,
            overhead_s=mean("overhead_s"),
            allreduce_s=mean("allreduce_s"),
            ttft_s=ttft,
            e2e_s=e2e,
            qps=c / e2e,
            bandwidth_bound_tok_s_per_user=1.0 / (decode.weights_read_s + decode.kv_traffic_s),
            steps=kinds,
        )


def last_true(pred: Callable[[int], bool], hi: int) -> int:
    """Largest c in [1, hi] with pred(c), for pred true up to a point and false after; 0 if pred(1) fails."""
    if hi < 1 or not pred(1):
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def ladder_levels(limit: int, extra: tuple[int, ...] = ()) -> list[int]:
    """1, 2, 4, ... up to `limit`, then `limit` itself and any extra levels within it."""
    levels: set[int] = set()
    c = 1
    while c <= limit:
        levels.add(c)
        c *= 2
    levels.add(limit)
    levels.update(x for x in extra if 1 <= x <= limit)
    return sorted(levels)


def _last_meeting(
    name: str, value: Callable[[int], float], ok: Callable[[float], bool], limit: int, what: str, unit: str
) -> KneeCandidate:
    """The last c within `limit` whose value passes `ok` (None when every c passes)."""
    c = last_true(lambda x: ok(value(x)), limit)
    if c == limit:
        return KneeCandidate(
            name, None, f"{what}: holds up to the memory limit", f"c = {limit}: {value(limit):.6g} {unit}"
        )
    if c == 0:
        return KneeCandidate(name, 0, f"{what}: not even one user", f"c = 1: {value(1):.6g} {unit}")
    evidence = f"c = {c}: {value(c):.6g} {unit}; c = {c + 1}: {value(c + 1):.6g} {unit}"
    return KneeCandidate(name, c, what, evidence)


def plan_speed(
    stm: StepTimeModel,
    lengths: Lengths,
    memory_limit: int,
    slo: PlanSlo,
    *,
    max_num_batched_tokens: int = 8192,
) -> SpeedPlan:
    if memory_limit < 1:
        raise ValueError(f"memory_limit must be >= 1 (the model must hold one request), got {memory_limit}")
    cur = Curves(stm, lengths)
    target = slo.tok_s_per_user
    candidates = [
        KneeCandidate(
            "memory",
            memory_limit,
            "max concurrency by memory (exact): every request holds its whole context in KV",
            f"= max_concurrency_memory {memory_limit}",
        ),
        _last_meeting(
            "tok_s_per_user",
            lambda c: 1.0 / cur.tpot(c),
            lambda v: v >= target,
            memory_limit,
            f"last c with 1 / TPOT(c) >= {target:g} tok/s ({slo.tok_s_source})",
            "tok/s",
        ),
    ]
    first_compute = last_true(lambda c: not cur.matmuls_compute_bound(c), memory_limit) + 1

    def lin_vs_w(c: int) -> str:
        kinds = cur.cycle(c)
        lin = sum(k.count * k.linear_compute_s for k in kinds)
        w = sum(k.count * k.weights_read_s for k in kinds)
        return f"c = {c}: matmul FLOPs {lin:.6g} s vs weight reads {w:.6g} s per cycle"

    rule = "first c where, over a cycle, the matmuls' FLOPs / (peak x MFU) reach the weights' bytes / (bandwidth x e)"
    if first_compute > memory_limit:
        candidates.append(
            KneeCandidate(
                "compute_bound", None, rule + ": bandwidth-bound up to the memory limit", lin_vs_w(memory_limit)
            )
        )
    else:
        before = f"{lin_vs_w(first_compute - 1)}; " if first_compute > 1 else ""
        candidates.append(KneeCandidate("compute_bound", first_compute, rule, before + lin_vs_w(first_compute)))
    if slo.ttft_s is not None:
        ttft_limit = slo.ttft_s
        candidates.append(
            _last_meeting(
                "ttft",
                cur.ttft,
                lambda v: v <= ttft_limit,
                memory_limit,
                f"last c with TTFT(c) <= {ttft_limit:g} s",
                "s",
            )
        )
    if slo.e2e_s is not None:
        e2e_limit = slo.e2e_s
        candidates.append(
            _last_meeting(
                "e2e", cur.e2e, lambda v: v <= e2e_limit, memory_limit, f"last c with E2E(c) <= {e2e_limit:g} s", "s"
            )
        )
    knee = min(c.concurrency for c in candidates if c.concurrency is not None)
    binding = tuple(c.name for c in candidates if c.concurrency == knee)
    rows = tuple(cur.row(c) for c in ladder_levels(memory_limit, (knee,)))
    at_knee = next((r for r in rows if r.concurrency == knee), None)
    eff = stm.eff
    bw = stm.gpu.bandwidth_bytes_s * eff.bandwidth
    return SpeedPlan(
        input_tokens=cur.input,
        output_tokens=cur.output,
        decode_context_tokens=cur.ctx,
        prefill_tokens=cur.prompt,
        output_tokens_int=cur.out,
        prefill_time_s=stm.prefill_time_s(cur.prompt, max_num_batched_tokens),
        max_num_batched_tokens=max_num_batched_tokens,
        tok_s_target=target,
        effective_bandwidth_bytes_s=bw,
        effective_peak_flops=stm.peak_flops * eff.compute_decode,
        roofline_inputs=(
            f"{stm.gpu.name}: bandwidth {num(stm.gpu.bandwidth_bytes_s)} B/s x {num(eff.bandwidth)}; peak "
            f"{num(stm.peak_flops)} FLOP/s ({stm.dtype.compute_class} for {stm.dtype.name}) x MFU prefill "
            f"{num(eff.compute_prefill)} / decode {num(eff.compute_decode)}; overheads {num(eff.step_overhead_s)} s "
            f"per step + {num(eff.per_layer_overhead_s)} s per layer (roofline.DEFAULT_EFFICIENCIES)"
        ),
        ladder=rows,
        candidates=tuple(candidates),
        predicted_knee=knee,
        binding=binding,
        at_knee=at_knee,
    )
