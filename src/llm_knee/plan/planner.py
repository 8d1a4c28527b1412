"""One capacity plan: memory, speed, knee, fleet, TP trade-off and (on unified memory) edge figures.

    plan = make_plan(PlanRequest(get_model("llama-3.1-8b"), get_gpu("h100"), get_dtype("bf16"),
                                 Lengths.parse("512", "256"), target_qps=20))
    plan.predicted_knee, plan.fleet.gpus_needed, plan.to_dict(), plan.figures()

Raises DoesNotFitError (shortfall and the options that fit), PlanInputError or ValueError (bad input).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llm_knee.catalog.dtypes import DType, get_dtype
from llm_knee.catalog.hardware import GpuSpec
from llm_knee.catalog.models import ModelSpec
from llm_knee.plan.edge import LLAMA_CPP_UBATCH, EdgePlan, plan_edge
from llm_knee.plan.explain import Figure
from llm_knee.plan.fleet import FleetPlan, plan_fleet
from llm_knee.plan.inputs import Lengths, PlanInputError, PlanSlo, fleet_efficiency
from llm_knee.plan.memory import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_OS_RESERVE_BYTES,
    MemoryPlan,
    plan_memory,
)
from llm_knee.plan.roofline import DEFAULT_EFFICIENCIES, DoesNotFitError, Efficiencies, StepTimeModel, valid_tp_sizes
from llm_knee.plan.speed import LadderRow, SpeedPlan, plan_speed

VLLM_DEFAULT_MAX_NUM_SEQS = 256
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class PlanRequest:
    model: ModelSpec
    gpu: GpuSpec
    dtype: DType
    lengths: Lengths
    slo: PlanSlo = field(default_factory=PlanSlo)
    kv_dtype: DType | None = None
    tp: int = 1
    gpus: int | None = None
    gpu_memory_utilization: float | None = None  # None: 0.9 (vLLM) on discrete GPUs, 1.0 on unified memory
    os_reserve_bytes: float | None = None  # None: DEFAULT_OS_RESERVE_BYTES on unified memory, else 0
    target_qps: float | None = None
    efficiency: float | None = None
    price_per_gpu_hour: float | None = None
    eff: Efficiencies = DEFAULT_EFFICIENCIES

    @property
    def unified(self) -> bool:
        return self.gpu.unified_memory

    @property
    def utilization(self) -> float:
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return 1.0 if self.unified else DEFAULT_GPU_MEMORY_UTILIZATION

    @property
    def os_reserve(self) -> float:
        if not self.unified:
            return 0.0
        return DEFAULT_OS_RESERVE_BYTES if self.os_reserve_bytes is None else self.os_reserve_bytes

    @property
    def step_budget(self) -> int:
        return LLAMA_CPP_UBATCH if self.unified else DEFAULT_MAX_NUM_BATCHED_TOKENS


@dataclass(frozen=True)
class TpOption:
    tp: int
    max_concurrency_memory: int
    predicted_knee: int
    binding: tuple[str, ...]
    tok_s_per_user_at_knee: float | None
    replica_qps: float
    qps_per_gpu: float
    gpus_needed: int | None
    gpus_needed_with_headroom: int | None


@dataclass(frozen=True)
class CapacityPlan:
    request: PlanRequest
    memory: MemoryPlan
    speed: SpeedPlan
    fleet: FleetPlan
    tp_options: tuple[TpOption, ...]
    edge: EdgePlan | None
    notes: tuple[str, ...]

    @property
    def predicted_knee(self) -> int:
        return self.speed.predicted_knee

    def figures(self) -> list[Figure]:
        figs = self.memory.figures() + self.speed.figures() + self.fleet.figures()
        if self.edge is not None:
            figs += self.edge.figures()
        return figs

    def to_dict(self) -> dict[str, Any]:
        """Every figure under stable keys (exact values); None where a figure does not apply."""
        r, m, s, f = self.request, self.memory, self.speed, self.fleet
        k = s.at_knee
        return {
            "schema_version": SCHEMA_VERSION,
            "inputs": {
                "model": r.model.name,
                "gpu": r.gpu.name,
                "dtype": r.dtype.name,
                "kv_dtype": m.kv_dtype,
                "tp": r.tp,
                "gpus": r.gpus,
                "input_len": str(r.lengths.input),
                "output_len": str(r.lengths.output),
                "input_len_mean": r.lengths.input_mean,
                "output_len_mean": r.lengths.output_mean,
                "input_len_memory": r.lengths.input_memory,
                "output_len_memory": r.lengths.output_memory,
                "lengths_rule": r.lengths.describe(),
                "gpu_memory_utilization": r.utilization,
                "os_reserve_bytes": r.os_reserve,
                "target_qps": r.target_qps,
                "slo": r.slo.text or None,
                "tok_s_per_user_target": r.slo.tok_s_per_user,
                "ttft_limit_s": r.slo.ttft_s,
                "e2e_limit_s": r.slo.e2e_s,
                "efficiency": f.efficiency,
                "efficiency_source": f.efficiency_source,
                "headroom": f.headroom,
                "price_per_gpu_hour": r.price_per_gpu_hour,
                "roofline_efficiencies": {
                    "bandwidth": r.eff.bandwidth,
                    "compute_prefill": r.eff.compute_prefill,
                    "compute_decode": r.eff.compute_decode,
                    "step_overhead_s": r.eff.step_overhead_s,
                    "per_layer_overhead_s": r.eff.per_layer_overhead_s,
                },
            },
            "fits": m.fits,
            "weights_bytes": m.weights_bytes,
            "weights_bytes_per_gpu": m.weights_bytes_per_gpu,
            "runtime_reserve_bytes": m.runtime_reserve_bytes,
            "usable_bytes_per_gpu": m.usable_bytes_per_gpu,
            "kv_free_bytes_per_gpu": m.kv_free_bytes_per_gpu,
            "kv_bytes_per_token": m.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": m.kv_bytes_per_token_per_gpu,
            "request_tokens_memory": m.request_tokens,
            "kv_bytes_per_request": m.kv_bytes_per_request,
            "kv_capacity_tokens": m.kv_capacity_tokens,
            "max_concurrency_memory": m.max_concurrency_memory,
            "max_concurrency_memory_safe": m.max_concurrency_memory_safe,
            "safe_usable_fraction": m.safe_usable_fraction,
            "prefill_time_s": s.prefill_time_s,
            "decode_context_tokens": s.decode_context_tokens,
            "ladder": [_row_dict(row) for row in s.ladder],
            "knee_candidates": {c.name: {"concurrency": c.concurrency, "reason": c.reason} for c in s.candidates},
            "predicted_knee": s.predicted_knee,
            "knee_binding": list(s.binding),
            "mean_step_s_at_knee": None if k is None else k.mean_step_s,
            "decode_step_s_at_knee": None if k is None else k.decode_step_s,
            "tok_s_per_user_at_knee": None if k is None else k.tok_s_per_user,
            "ttft_s_at_knee": None if k is None else k.ttft_s,
            "e2e_s_at_knee": None if k is None else k.e2e_s,
            "replica_qps": f.replica_qps,
            "replica_output_tok_s": f.replica_output_tok_s,
            "gpus_per_replica": f.gpus_per_replica,
            "replicas_needed": f.replicas_needed,
            "gpus_needed": f.gpus_needed,
            "gpus_needed_with_headroom": f.gpus_needed_with_headroom,
            "gpus_available": f.gpus_available,
            "qps_available": f.qps_available,
            "usd_per_hour": f.usd_per_hour,
            "usd_per_hour_basis": f.usd_per_hour_basis or None,
            "usd_per_mtok_at_knee": f.usd_per_mtok_at_knee,
            "fleet_usd_per_mtok": f.fleet_usd_per_mtok,
            "tp_options": [o.__dict__ | {"binding": list(o.binding)} for o in self.tp_options],
            "edge": None if self.edge is None else _edge_dict(self.edge),
            "notes": list(self.notes),
            "explain": [fig.to_dict() for fig in self.figures()],
        }


def _row_dict(row: LadderRow) -> dict[str, Any]:
    d = dict(row.__dict__)
    d["steps"] = [dict(t.__dict__) for t in row.steps]
    return d


def _edge_dict(e: EdgePlan) -> dict[str, Any]:
    return {
        "device": e.device,
        "os_reserve_bytes": e.os_reserve_bytes,
        "bandwidth_bound_tok_s_one_user": e.bandwidth_bound_tok_s_one_user,
        "tok_s_one_user": e.tok_s_one_user,
        "tok_s_target": e.tok_s_target,
        "users_at_target": e.users_at_target,
        "quantization": [q.__dict__ for q in e.quantization],
        "llama_cpp_flags": [fl.__dict__ for fl in e.llama_cpp_flags],
        "llama_cpp_command": e.command,
    }


def step_model(req: PlanRequest, tp: int | None = None) -> StepTimeModel:
    kv = req.kv_dtype
    if kv is None and req.unified:
        kv = get_dtype("fp16")  # llama.cpp's default KV cache type
    return StepTimeModel(req.model, req.gpu, req.dtype, tp=req.tp if tp is None else tp, kv_dtype=kv, eff=req.eff)


def _core(req: PlanRequest, stm: StepTimeModel) -> tuple[MemoryPlan, SpeedPlan]:
    mem = plan_memory(
        stm,
        req.lengths.request_tokens_memory,
        gpu_memory_utilization=req.utilization,
        os_reserve_bytes=req.os_reserve,
        max_num_batched_tokens=req.step_budget,
    )
    speed = plan_speed(stm, req.lengths, mem.max_concurrency_memory, req.slo, max_num_batched_tokens=req.step_budget)
    return mem, speed


def _fleet(req: PlanRequest, speed: SpeedPlan, tp: int, gpus: int | None) -> FleetPlan:
    efficiency, source = fleet_efficiency(req.efficiency, req.slo)
    return plan_fleet(
        knee=speed.predicted_knee,
        e2e_s_at_knee=None if speed.at_knee is None else speed.at_knee.e2e_s,
        gpus_per_replica=tp,
        output_tokens_per_request=req.lengths.output_mean,
        efficiency=efficiency,
        efficiency_source=source,
        target_qps=req.target_qps,
        gpus_available=gpus,
        price_per_gpu_hour=req.price_per_gpu_hour,
    )


def tp_options(req: PlanRequest) -> tuple[TpOption, ...]:
    """Every valid TP degree that fits: the replicas-vs-tensor-parallel trade-off."""
    out: list[TpOption] = []
    if req.unified or req.gpu.interconnect_bytes_s is None:
        return ()
    for tp in valid_tp_sizes(req.model):
        try:
            mem, speed = _core(req, step_model(req, tp))
        except DoesNotFitError:
            continue
        fl = _fleet(req, speed, tp, None)
        out.append(
            TpOption(
                tp=tp,
                max_concurrency_memory=mem.max_concurrency_memory,
                predicted_knee=speed.predicted_knee,
                binding=speed.binding,
                tok_s_per_user_at_knee=None if speed.at_knee is None else speed.at_knee.tok_s_per_user,
                replica_qps=fl.replica_qps,
                qps_per_gpu=fl.replica_qps / tp,
                gpus_needed=fl.gpus_needed,
                gpus_needed_with_headroom=fl.gpus_needed_with_headroom,
            )
        )
    return tuple(out)


def _check(req: PlanRequest) -> None:
    if req.gpus is not None and req.gpus < 1:
        raise PlanInputError(f"--gpus must be >= 1, got {req.gpus}")
    if req.gpus is not None and req.gpus < req.tp:
        raise PlanInputError(f"--gpus {req.gpus} is fewer than one replica's --tp {req.tp}")
    if req.unified and req.tp > 1:
        raise PlanInputError(f"{req.gpu.name} is a single unified-memory device: tensor parallel does not apply")
    if req.os_reserve_bytes is not None and not req.unified and req.os_reserve_bytes > 0:
        raise PlanInputError("--os-reserve-gib applies to unified-memory devices only (the GPU has its own memory)")


def make_plan(req: PlanRequest) -> CapacityPlan:
    _check(req)
    fleet_efficiency(req.efficiency, req.slo)  # bad efficiency fails before any arithmetic
    stm = step_model(req)
    stm.check_lengths(req.lengths.input_memory, req.lengths.output_memory)
    mem, speed = _core(req, stm)
    fleet = _fleet(req, speed, req.tp, req.gpus)
    options = tp_options(req) if req.tp > 1 else ()
    edge = (
        plan_edge(stm, req.lengths, req.slo, mem, speed, gpu_memory_utilization=req.utilization)
        if req.unified
        else None
    )
    return CapacityPlan(req, mem, speed, fleet, options, edge, _notes(req, stm, speed))


def _notes(req: PlanRequest, stm: StepTimeModel, speed: SpeedPlan) -> tuple[str, ...]:
    notes = [
        "TTFT and E2E include the other users' prefills spread evenly over the steps, but not waiting for a "
        "running step to end nor users arriving in waves; --simulate runs the engine simulator, which has both."
    ]
    if not req.unified and speed.predicted_knee > VLLM_DEFAULT_MAX_NUM_SEQS:
        notes.append(
            f"vLLM runs at most --max-num-seqs {VLLM_DEFAULT_MAX_NUM_SEQS} sequences by default; raise it to "
            f">= {speed.predicted_knee} to reach this knee."
        )
    if req.model.sliding_window is not None and req.lengths.request_tokens_memory > req.model.sliding_window:
        notes.append(
            f"{req.model.name} attends over a {req.model.sliding_window}-token sliding window; KV here assumes "
            "full attention, which overstates it past the window."
        )
    if req.model.is_moe:
        notes.append(
            f"MoE: memory holds all {req.model.n_experts} experts ({req.model.total_params:,} parameters); a "
            f"decode step reads the experts its tokens route to ({stm.expected_experts_touched(1):g} of "
            f"{req.model.n_experts} per layer for one token, {req.model.active_params:,} active parameters)."
        )
    if req.gpu.uncertain:
        notes.append(f"{req.gpu.name}: catalog figures marked uncertain: {', '.join(sorted(req.gpu.uncertain))}.")
    return tuple(notes)
