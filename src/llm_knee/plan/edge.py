"""Edge mode: a unified-memory device (e.g. Jetson AGX Orin) serving with llama.cpp.

The device's DRAM holds the OS, the CPU side of the server, the weights and the KV cache together, so the
memory budget is (memory - OS reserve); the GPU decodes at the DRAM bandwidth, which is what decides how
many users can each get a target tokens/s:

    bandwidth-bound tok/s per user at c = 1 / ((weights read + c x KV read) / (bandwidth x e))
    users at target = the largest c (within memory) with 1 / step(c) >= target

step(c) is the full roofline step (it adds fixed per-step and per-layer costs to the bandwidth bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_knee.catalog.dtypes import get_dtype
from llm_knee.plan.explain import GIB, Figure, num
from llm_knee.plan.inputs import Lengths, PlanSlo
from llm_knee.plan.memory import MemoryPlan, plan_memory
from llm_knee.plan.roofline import DoesNotFitError, StepTimeModel
from llm_knee.plan.speed import Curves, SpeedPlan, plan_speed

QUANT_LADDER = ("fp16", "q8_0", "q4_k_m")
LLAMA_CPP_UBATCH = 512  # llama.cpp's default physical batch (-ub): sizes its compute buffer
LLAMA_CPP_MAX_BATCH = 2048  # llama.cpp's default logical batch (-b)

# CPU cores of unified-memory devices (for --threads). Not in the catalog's GpuSpec; the lead may move it.
CPU_CORES: dict[str, tuple[int, str]] = {
    "Jetson-AGX-Orin-64GB": (12, "12-core Arm Cortex-A78AE (NVIDIA Jetson AGX Orin 64GB module data sheet)"),
}


@dataclass(frozen=True)
class QuantRow:
    dtype: str
    weights_bytes: float
    fits: bool
    shortfall_gib: float | None
    kv_capacity_tokens: int | None
    max_concurrency_memory: int | None
    bandwidth_bound_tok_s_one_user: float
    tok_s_one_user: float
    users_at_target: int | None


@dataclass(frozen=True)
class LlamaCppFlag:
    flag: str
    value: str
    reason: str


@dataclass(frozen=True)
class EdgePlan:
    device: str
    memory_bytes: int
    os_reserve_bytes: float
    bandwidth_bytes_s: float
    bandwidth_efficiency: float
    tok_s_target: float
    bandwidth_bound_tok_s_one_user: float
    tok_s_one_user: float
    users_at_target: int
    quantization: tuple[QuantRow, ...]
    llama_cpp_flags: tuple[LlamaCppFlag, ...]

    @property
    def command(self) -> str:
        return "llama-server -m MODEL.gguf " + " ".join(f"{f.flag} {f.value}" for f in self.llama_cpp_flags)

    def figures(self) -> list[Figure]:
        return [
            Figure(
                "os_reserve_bytes",
                "OS / CPU reserve (unified memory, assumed)",
                self.os_reserve_bytes,
                "B",
                "memory the OS, desktop and the server's CPU side keep out of the budget",
                f"{num(self.os_reserve_bytes / GIB)} GiB (--os-reserve-gib)",
            ),
            Figure(
                "edge_bandwidth_bound_tok_s_one_user",
                "Bandwidth-bound tok/s, one user",
                self.bandwidth_bound_tok_s_one_user,
                "tok/s",
                "bandwidth x e / (weights read + KV read and written per token)",
                f"{num(self.bandwidth_bytes_s)} x {num(self.bandwidth_efficiency)} / bytes per step",
            ),
            Figure(
                "edge_users_at_target",
                f"Users that each get {self.tok_s_target:g} tok/s",
                self.users_at_target,
                "users",
                "largest c within memory with 1 / step(c) >= target",
                f"target {num(self.tok_s_target)} tok/s",
            ),
        ]


def _quant_row(
    base: StepTimeModel, name: str, lengths: Lengths, slo: PlanSlo, fraction_util: float, os_b: float
) -> QuantRow:
    dtype = get_dtype(name)
    # llama.cpp keeps its KV cache in f16 whatever the weight format (-ctk/-ctv f16 by default).
    stm = StepTimeModel(base.model, base.gpu, dtype, tp=1, kv_dtype=get_dtype("fp16"), eff=base.eff)
    one = Curves(stm, lengths).decode_only(1)
    try:
        mem = plan_memory(
            stm,
            lengths.request_tokens_memory,
            gpu_memory_utilization=fraction_util,
            os_reserve_bytes=os_b,
            max_num_batched_tokens=LLAMA_CPP_UBATCH,
        )
    except DoesNotFitError as exc:
        return QuantRow(
            name, stm.weights_bytes, False, exc.shortfall_gib, None, None,
            1.0 / (one.weights_read_s + one.kv_traffic_s), 1.0 / one.total_s, None,
        )  # fmt: skip
    speed = plan_speed(stm, lengths, mem.max_concurrency_memory, slo, max_num_batched_tokens=LLAMA_CPP_UBATCH)
    users = _users_at_target(speed, mem)
    return QuantRow(
        name, stm.weights_bytes, True, None, mem.kv_capacity_tokens, mem.max_concurrency_memory,
        1.0 / (one.weights_read_s + one.kv_traffic_s), 1.0 / one.total_s, users,
    )  # fmt: skip


def _users_at_target(speed: SpeedPlan, memory: MemoryPlan) -> int:
    cand = next(c for c in speed.candidates if c.name == "tok_s_per_user")
    return memory.max_concurrency_memory if cand.concurrency is None else cand.concurrency


def plan_edge(
    stm: StepTimeModel,
    lengths: Lengths,
    slo: PlanSlo,
    memory: MemoryPlan,
    speed: SpeedPlan,
    *,
    gpu_memory_utilization: float,
) -> EdgePlan:
    """Edge figures for a plan whose memory and speed were computed with the OS reserve."""
    gpu = stm.gpu
    one = speed.ladder[0]
    users = _users_at_target(speed, memory)
    rows = tuple(
        _quant_row(stm, name, lengths, slo, gpu_memory_utilization, memory.os_reserve_bytes) for name in QUANT_LADDER
    )
    parallel = max(1, users)
    per_slot = lengths.request_tokens_memory
    cores = CPU_CORES.get(gpu.name)
    prompt = lengths.input_memory
    batch = min(LLAMA_CPP_MAX_BATCH, max(LLAMA_CPP_UBATCH, 2 ** math.ceil(math.log2(prompt))))
    speed_words = (
        f"{users} users each get >= {slo.tok_s_per_user:g} tok/s within memory"
        if users > 0
        else f"no user count reaches {slo.tok_s_per_user:g} tok/s (one user gets {one.tok_s_per_user:.1f}); "
        "one slot gives the fastest answers"
    )
    flags = (
        LlamaCppFlag(
            "-ngl", "99", "every layer on the GPU: unified memory needs no copy and the GPU reads DRAM fastest"
        ),
        LlamaCppFlag("--parallel", str(parallel), speed_words),
        LlamaCppFlag(
            "-c",
            str(parallel * per_slot),
            f"-c is the KV context of all slots together: {parallel} slots x {per_slot} tokens (prompt + output "
            f"at the memory quantiles) = {parallel * per_slot * memory.kv_bytes_per_token / GIB:.2f} GiB of f16 KV",
        ),
        LlamaCppFlag(
            "--threads",
            str(cores[0]) if cores else "$(nproc)",
            (f"{cores[1]}; " if cores else "all CPU cores; ")
            + "with every layer offloaded the CPU only tokenizes, samples and serves HTTP",
        ),
        LlamaCppFlag(
            "--batch-size",
            str(batch),
            f"a {prompt}-token prompt (memory quantile) is evaluated in one logical batch, so TTFT is one pass; "
            f"the compute buffer grows with the physical batch (-ub {LLAMA_CPP_UBATCH}), not with this",
        ),
    )
    return EdgePlan(
        device=gpu.name,
        memory_bytes=gpu.memory_bytes,
        os_reserve_bytes=memory.os_reserve_bytes,
        bandwidth_bytes_s=gpu.bandwidth_bytes_s,
        bandwidth_efficiency=stm.eff.bandwidth,
        tok_s_target=slo.tok_s_per_user,
        bandwidth_bound_tok_s_one_user=one.bandwidth_bound_tok_s_per_user,
        tok_s_one_user=one.tok_s_per_user,
        users_at_target=users,
        quantization=rows,
        llama_cpp_flags=flags,
    )
