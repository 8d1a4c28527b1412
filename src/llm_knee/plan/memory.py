"""Memory side of a plan: weights, KV per token and per request, KV capacity, max concurrency by memory.

    usable     = GPU memory x f                       f = --gpu-memory-utilization (vLLM's default 0.9);
                                                      unified memory: f x (1 - OS reserve / memory)
    KV free    = usable - weights / tp - runtime reserve          (per GPU; reserve from roofline.py)
    capacity   = floor(KV free / KV bytes per token per GPU)      tokens
    max conc.  = floor(capacity / (prompt + output tokens))       requests, each holding its whole context

The "safe" figure is the same with f capped at 0.85, the practitioners' usable fraction (domain.md §5).
KV blocks (16 tokens in vLLM) are not rounded up: at most one partial block per request is lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_knee.catalog.dtypes import get_dtype
from llm_knee.catalog.hardware import GIB
from llm_knee.plan.explain import Figure, num
from llm_knee.plan.roofline import DoesNotFitError, StepTimeModel, valid_tp_sizes

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
SAFETY_FRACTION = 0.85  # domain.md §5: practitioners use 0.85-0.9 of GPU memory
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM V1's default step budget (sizes the activation reserve)
# Unified-memory devices share their DRAM with the OS, the desktop and CPU-side buffers of the server.
# 6 GiB is our assumption for a JetPack/Ubuntu system running llama.cpp (change it with --os-reserve-gib).
DEFAULT_OS_RESERVE_BYTES = 6 * GIB

_DATACENTER_DTYPES = ("fp8", "int8", "int4")
_EDGE_DTYPES = ("q8_0", "q4_k_m")


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    gpu: str
    dtype: str
    kv_dtype: str
    tp: int
    unified_memory: bool
    gpu_memory_bytes: int
    os_reserve_bytes: float
    gpu_memory_utilization: float
    usable_fraction: float
    usable_bytes_per_gpu: float
    weights_bytes: float
    weights_bytes_per_gpu: float
    runtime_reserve_bytes: float
    max_num_batched_tokens: int
    kv_free_bytes_per_gpu: float
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    request_tokens: int
    kv_bytes_per_request: float
    kv_capacity_tokens: int
    max_concurrency_memory: int
    safe_usable_fraction: float
    kv_capacity_tokens_safe: int
    max_concurrency_memory_safe: int
    weights_inputs: str = ""
    kv_inputs: str = ""
    reserve_inputs: str = ""

    @property
    def fits(self) -> bool:
        return self.max_concurrency_memory >= 1

    def figures(self) -> list[Figure]:
        os_part = f" x (1 - {num(self.os_reserve_bytes)} / {self.gpu_memory_bytes})" if self.unified_memory else ""
        usable_formula = "GPU memory x f" + (" x (1 - OS reserve / memory)" if self.unified_memory else "")
        return [
            Figure(
                "weights_bytes",
                "Weights",
                self.weights_bytes,
                "B",
                "parameters x bytes per parameter (whole model; memory holds every expert)",
                self.weights_inputs,
            ),
            Figure(
                "weights_bytes_per_gpu",
                "Weights per GPU",
                self.weights_bytes_per_gpu,
                "B",
                "weights / tp",
                f"{num(self.weights_bytes)} / {self.tp}",
            ),
            Figure(
                "kv_bytes_per_token",
                "KV cache per token",
                self.kv_bytes_per_token,
                "B",
                "2 (K and V) x layers x KV heads x head dim x bytes per element",
                self.kv_inputs,
            ),
            Figure(
                "kv_bytes_per_request",
                "KV cache per request",
                self.kv_bytes_per_request,
                "B",
                "KV per token x (prompt + output tokens, memory quantiles)",
                f"{num(self.kv_bytes_per_token)} x {self.request_tokens}",
            ),
            Figure(
                "usable_bytes_per_gpu",
                "Usable memory per GPU",
                self.usable_bytes_per_gpu,
                "B",
                usable_formula,
                f"{self.gpu_memory_bytes} x {num(self.gpu_memory_utilization)}{os_part}",
            ),
            Figure(
                "runtime_reserve_bytes",
                "Runtime reserve per GPU",
                self.runtime_reserve_bytes,
                "B",
                "1 GiB (CUDA context, workspaces, graphs) + max_num_batched_tokens x (3 x intermediate x "
                "experts per token / tp + 4 x hidden) x 2 B + 256 x vocab x 4 B (fp32 logits)",
                self.reserve_inputs,
            ),
            Figure(
                "kv_free_bytes_per_gpu",
                "Memory left for KV per GPU",
                self.kv_free_bytes_per_gpu,
                "B",
                "usable - weights per GPU - runtime reserve",
                f"{num(self.usable_bytes_per_gpu)} - {num(self.weights_bytes_per_gpu)} - "
                f"{num(self.runtime_reserve_bytes)}",
            ),
            Figure(
                "kv_capacity_tokens",
                "KV capacity",
                self.kv_capacity_tokens,
                "tokens",
                "floor(KV free per GPU / KV per token per GPU)",
                f"floor({num(self.kv_free_bytes_per_gpu)} / {num(self.kv_bytes_per_token_per_gpu)})",
            ),
            Figure(
                "max_concurrency_memory",
                "Max concurrency by memory (exact)",
                self.max_concurrency_memory,
                "requests",
                "floor(KV capacity / (prompt + output tokens))",
                f"floor({self.kv_capacity_tokens} / {self.request_tokens}) at f = {num(self.usable_fraction)}",
            ),
            Figure(
                "max_concurrency_memory_safe",
                "Max concurrency by memory (0.85 safety)",
                self.max_concurrency_memory_safe,
                "requests",
                "floor(floor((GPU memory x min(f, 0.85) - weights per GPU - reserve) / KV per token per GPU) "
                "/ (prompt + output))",
                f"floor({self.kv_capacity_tokens_safe} / {self.request_tokens}) at fraction "
                f"{num(self.safe_usable_fraction)}",
            ),
        ]


def usable_fraction(gpu_memory_utilization: float, gpu_memory_bytes: int, os_reserve_bytes: float) -> float:
    """The fraction of the device's memory the engine may use (OS reserve only on unified memory)."""
    return gpu_memory_utilization * (1.0 - os_reserve_bytes / gpu_memory_bytes)


def _capacity(stm: StepTimeModel, fraction: float, mnbt: int) -> int:
    free = stm.kv_free_bytes_per_gpu(fraction, mnbt)
    return math.floor(free / stm.kv_bytes_per_token_per_gpu) if free >= stm.kv_bytes_per_token_per_gpu else 0


def _holds(stm: StepTimeModel, fraction: float, mnbt: int, request_tokens: int) -> bool:
    return _capacity(stm, fraction, mnbt) >= request_tokens


def plan_memory(
    stm: StepTimeModel,
    request_tokens: int,
    *,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    os_reserve_bytes: float = 0.0,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> MemoryPlan:
    """The memory figures; DoesNotFitError (shortfall and fitting options) when not even one request fits."""
    if request_tokens < 1:
        raise ValueError(f"request_tokens must be >= 1, got {request_tokens}")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization:g}")
    gpu = stm.gpu
    if not 0.0 <= os_reserve_bytes < gpu.memory_bytes:
        raise ValueError(
            f"OS reserve must be >= 0 and below the device's {gpu.memory_bytes / GIB:g} GiB, "
            f"got {os_reserve_bytes / GIB:g} GiB"
        )
    fraction = usable_fraction(gpu_memory_utilization, gpu.memory_bytes, os_reserve_bytes)
    safe_fraction = usable_fraction(min(gpu_memory_utilization, SAFETY_FRACTION), gpu.memory_bytes, os_reserve_bytes)
    mnbt = max_num_batched_tokens
    capacity = _capacity(stm, fraction, mnbt)
    if capacity < request_tokens:
        raise does_not_fit(stm, request_tokens, fraction, mnbt, os_reserve_bytes)
    capacity_safe = _capacity(stm, safe_fraction, mnbt)
    m = stm.model
    kv_heads_gpu = max(m.n_kv_heads / stm.tp, 1.0)
    weights_inputs = f"{m.total_params} x {num(stm.dtype.bytes_per_param)} ({stm.dtype.name}: {stm.dtype.note})"
    kv_inputs = (
        f"2 x {m.n_layers} x {m.n_kv_heads} x {m.head_dim} x {num(stm.kv_dtype.bytes_per_param)} "
        f"({m.n_heads} attention heads, {m.n_kv_heads} KV heads); per GPU 2 x {m.n_layers} x "
        f"max({m.n_kv_heads} / {stm.tp}, 1) = {num(kv_heads_gpu)} heads -> {num(stm.kv_bytes_per_token_per_gpu)} B"
    )
    reserve_inputs = (
        f"1073741824 + {mnbt} x (3 x {m.intermediate_size} x {m.experts_per_token} / {stm.tp} + 4 x "
        f"{m.hidden_size}) x 2 + 256 x {m.vocab_size} x 4"
    )
    return MemoryPlan(
        model=stm.model.name,
        gpu=gpu.name,
        dtype=stm.dtype.name,
        kv_dtype=stm.kv_dtype.name,
        tp=stm.tp,
        unified_memory=gpu.unified_memory,
        gpu_memory_bytes=gpu.memory_bytes,
        os_reserve_bytes=os_reserve_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        usable_fraction=fraction,
        usable_bytes_per_gpu=gpu.memory_bytes * fraction,
        weights_bytes=stm.weights_bytes,
        weights_bytes_per_gpu=stm.weights_bytes_per_gpu,
        runtime_reserve_bytes=stm.runtime_reserve_bytes(mnbt),
        max_num_batched_tokens=mnbt,
        kv_free_bytes_per_gpu=stm.kv_free_bytes_per_gpu(fraction, mnbt),
        kv_bytes_per_token=stm.kv_bytes_per_token,
        kv_bytes_per_token_per_gpu=stm.kv_bytes_per_token_per_gpu,
        request_tokens=request_tokens,
        kv_bytes_per_request=stm.kv_bytes_per_token * request_tokens,
        kv_capacity_tokens=capacity,
        max_concurrency_memory=capacity // request_tokens,
        safe_usable_fraction=safe_fraction,
        kv_capacity_tokens_safe=capacity_safe,
        max_concurrency_memory_safe=capacity_safe // request_tokens,
        weights_inputs=weights_inputs,
        kv_inputs=kv_inputs,
        reserve_inputs=reserve_inputs,
    )


def _variant(
    stm: StepTimeModel, dtype: str | None = None, tp: int | None = None, kv: str | None = None
) -> StepTimeModel:
    return StepTimeModel(
        stm.model,
        stm.gpu,
        get_dtype(dtype) if dtype else stm.dtype,
        tp=tp if tp is not None else stm.tp,
        kv_dtype=get_dtype(kv) if kv else stm.kv_dtype,
        eff=stm.eff,
    )


def does_not_fit(
    stm: StepTimeModel, request_tokens: int, fraction: float, mnbt: int, os_reserve_bytes: float
) -> DoesNotFitError:
    """The error for a plan that cannot hold one request, with every option verified to fit."""
    gpu = stm.gpu
    free = stm.kv_free_bytes_per_gpu(fraction, mnbt)
    need_kv = stm.kv_bytes_per_token_per_gpu * request_tokens
    shortfall_gib = (need_kv - free) / GIB
    options: list[str] = []
    fitting_dtype: str | None = None
    for name in _EDGE_DTYPES if gpu.unified_memory else _DATACENTER_DTYPES:
        if get_dtype(name).bytes_per_param >= stm.dtype.bytes_per_param:
            continue
        variant = _variant(stm, dtype=name)
        if _holds(variant, fraction, mnbt, request_tokens):
            fitting_dtype = name
            options.append(f"--dtype {name} ({variant.weights_bytes / GIB:.1f} GiB of weights)")
            break
    fitting_tp: int | None = None
    if not gpu.unified_memory and gpu.interconnect_bytes_s is not None:
        for tp in valid_tp_sizes(stm.model):
            if tp > stm.tp and _holds(_variant(stm, tp=tp), fraction, mnbt, request_tokens):
                fitting_tp = tp
                options.append(f"--tp {tp} (tensor parallel over {tp} x {gpu.name})")
                break
    kv_fp8_fits = stm.kv_dtype.bytes_per_param > 1 and not gpu.unified_memory
    if kv_fp8_fits and _holds(_variant(stm, kv="fp8"), fraction, mnbt, request_tokens):
        options.append("--kv-cache-dtype fp8 (halves KV per token)")
    if free >= stm.kv_bytes_per_token_per_gpu:
        longest = math.floor(free / stm.kv_bytes_per_token_per_gpu)
        options.append(f"a shorter context: prompt + output <= {longest} tokens (now {request_tokens})")
    if not gpu.unified_memory and fraction < 0.95:
        needed = (stm.weights_bytes_per_gpu + stm.runtime_reserve_bytes(mnbt) + need_kv) / gpu.memory_bytes
        if needed <= 0.95:
            options.append(f"--gpu-memory-utilization {math.ceil(needed * 100) / 100:.2f}")
    if not options:
        options.append("a card with more memory")
    os_text = f" after a {os_reserve_bytes / GIB:g} GiB OS reserve" if os_reserve_bytes else ""
    message = (
        f"{stm.model.name} in {stm.dtype.name} does not fit on {stm.tp} x {gpu.name}: "
        f"{stm.weights_bytes_per_gpu / GIB:.2f} GiB weights + {stm.runtime_reserve_bytes(mnbt) / GIB:.2f} GiB "
        f"runtime reserve + {need_kv / GIB:.2f} GiB KV for one {request_tokens}-token request per GPU exceed "
        f"{gpu.memory_bytes * fraction / GIB:.2f} GiB usable ({fraction:.3f} of {gpu.memory_bytes / GIB:g} GiB"
        f"{os_text}); short by {shortfall_gib:.2f} GiB per GPU"
    )
    return DoesNotFitError(message, shortfall_gib, options, fitting_dtype, fitting_tp)
