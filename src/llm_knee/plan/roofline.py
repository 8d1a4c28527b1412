"""Roofline time of one engine step, KV-cache capacity and fit checks (for `knee plan` and the simulator).

One engine step runs every decoder layer once over the step's tokens: prefill chunks plus one token per
decoding sequence. Its kernels run one after another, so the step is modelled as two roofline terms, each the
slower of its memory and compute times, plus fixed overheads:

    t_linear = max(W_read / (BW*e_bw), F_lin_prefill / (P*e_cp) + F_lin_decode / (P*e_cd))
    t_attn   = max((KV_read + KV_write) / (BW*e_bw), F_att_prefill / (P*e_cp) + F_att_decode / (P*e_cd))
    t_step   = t_linear + t_attn + step_overhead + n_layers * per_layer_overhead + t_allreduce

per GPU of a tensor-parallel group (weights, KV heads and FLOPs all divide by tp), where

    W_read   = bytes of weights read once per step: every parameter except the input embedding table (a
               lookup touching only the step's rows). MoE: the non-expert weights plus, per layer, the
               expected number of distinct experts the step's T tokens route to,
               E * (1 - (1 - k/E)^T) (each token picks k of E experts uniformly): k for one token, E for many.
    KV_read  = decode_kv_tokens * kv_bytes_per_token   (decode attention streams each sequence's cache)
    KV_write = (n_prefill_tokens + n_decode) * kv_bytes_per_token
    F_lin    = 2 * (decoder-layer matmul params active per token) * tokens, plus the lm_head
               2 * vocab * hidden for each decode token (prefill chunks produce at most one logit row per
               prompt, ignored).
    F_att    = 4 * n_layers * n_heads * head_dim * attention pairs: per (query, key) pair and head, QK^T costs
               2*head_dim FLOPs and the weighted sum of V another 2*head_dim. Pairs are prefill_attn_pairs
               (sum of chunk_len * (ctx_before + chunk_len/2), the causal triangle) plus decode_kv_tokens.
    P        = dense tensor peak of the weight dtype's compute class (FP8 on cards that have it, else 16-bit)
    t_allreduce = 2 all-reduces per layer (after attention and after the MLP) of tokens * hidden * 2 bytes,
               each (2 (tp-1)/tp) * bytes / (link * e_link) + allreduce_latency (ring), 0 when tp=1.

Not modelled: the prefill chunk's read of earlier KV (compute-bound anyway), activations traffic,
sliding-window savings, sampling cost beyond the per-step overhead.

Memory (per GPU): KV capacity = (memory * gpu_memory_utilization - weights/tp - runtime reserve)
/ KV per token per GPU. Runtime reserve, like vLLM's profiling run: 1 GiB of non-torch memory (CUDA context,
cuBLAS/NCCL workspaces, CUDA graphs) plus the peak activations of one forward pass over
max_num_batched_tokens tokens, tokens * (3 * intermediate * experts_per_token / tp + 4 * hidden) * 2 bytes,
plus fp32 logits for 256 sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_knee.catalog.dtypes import DType, get_dtype
from llm_knee.catalog.hardware import GIB, GpuSpec
from llm_knee.catalog.models import ModelSpec

NON_TORCH_RESERVE_BYTES = 1 * GIB
ACTIVATION_BYTES = 2  # activations are kept in 16 bits whatever the weight format
SAMPLER_ROWS = 256  # vLLM's default max_num_seqs: logits rows held in fp32 by the sampler
TP_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Efficiencies:
    """Achieved fractions of the spec-sheet peaks, and fixed costs. All named, all in one place.

    bandwidth: fraction of spec DRAM bandwidth achieved streaming weights and KV (GEMV / paged attention).
    compute_prefill: model FLOPs utilisation (MFU) of the prefill tokens' matmuls and attention.
    compute_decode: MFU of the decode tokens' matmuls and attention once a big batch makes them compute-bound.
    step_overhead_s: fixed cost per engine step (scheduling, sampling, input preparation, launch).
    per_layer_overhead_s: fixed cost per layer per step (small kernels: norms, rotary, activation, launches).
    interconnect: fraction of the GPU-to-GPU link bandwidth an all-reduce achieves.
    allreduce_latency_s: fixed latency of one all-reduce.
    """

    bandwidth: float
    compute_prefill: float
    compute_decode: float
    step_overhead_s: float
    per_layer_overhead_s: float
    interconnect: float = 0.7
    allreduce_latency_s: float = 10e-6

    def __post_init__(self) -> None:
        for name in ("bandwidth", "compute_prefill", "compute_decode", "interconnect"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"efficiency {name} must be in (0, 1], got {value}")
        for name in ("step_overhead_s", "per_layer_overhead_s", "allreduce_latency_s"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ValueError(f"{name} must be >= 0 seconds, got {value}")


# Calibrated by benchmarks/calibrate_steptime.py (its --search reproduces these) against
# shared/data/published-measurements.md: SGLang/vLLM ITL, TPOT and offline throughput on A100-80G (BF16) and
# TRT-LLM saturation throughput on H100/H200 (FP8); mean |error| 7.3 % over 18 points, worst -16.9 %.
# One set for every card: bandwidth 0.65 is what A100 decode achieves (H100/H200 likely do a little better),
# 0.55 MFU covers GEMMs plus attention, 1 ms + 10 us/layer per step covers scheduling, sampling and small kernels.
DEFAULT_EFFICIENCIES = Efficiencies(
    bandwidth=0.65,
    compute_prefill=0.55,
    compute_decode=0.55,
    step_overhead_s=1.0e-3,
    per_layer_overhead_s=10e-6,
)


class DoesNotFitError(ValueError):
    """The weights plus runtime reserve exceed the GPU memory budget.

    shortfall_gib: how many GiB per GPU are missing. suggestions: human-readable ways to make it fit.
    fitting_dtype / fitting_tp: the machine-readable best options (None when none fits).
    """

    def __init__(
        self,
        message: str,
        shortfall_gib: float,
        suggestions: list[str],
        fitting_dtype: str | None = None,
        fitting_tp: int | None = None,
    ) -> None:
        super().__init__(message + ("; options: " + "; ".join(suggestions) if suggestions else ""))
        self.shortfall_gib = shortfall_gib
        self.suggestions = suggestions
        self.fitting_dtype = fitting_dtype
        self.fitting_tp = fitting_tp


@dataclass(frozen=True)
class StepBreakdown:
    """The terms of one step time (seconds, per GPU); `bound` names the larger of the two roofline sides."""

    weights_read_s: float
    linear_compute_s: float
    kv_traffic_s: float
    attention_compute_s: float
    overhead_s: float
    allreduce_s: float
    total_s: float
    bound: str  # "memory" or "compute"


def valid_tp_sizes(model: ModelSpec) -> list[int]:
    """TP degrees an engine accepts: heads split evenly, KV heads split evenly or replicated."""
    return [
        tp for tp in TP_SIZES if model.n_heads % tp == 0 and (model.n_kv_heads % tp == 0 or tp % model.n_kv_heads == 0)
    ]


def default_kv_dtype(dtype: DType) -> DType:
    """Engines keep KV in the activation dtype (16 bits) unless told otherwise (e.g. --kv-cache-dtype fp8)."""
    if dtype.name in ("bf16", "fp16", "fp32"):
        return dtype
    return get_dtype("bf16")


class StepTimeModel:
    """Step times and memory of `model` in `dtype` on a tensor-parallel group of `tp` identical `gpu`s."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        dtype: DType,
        tp: int = 1,
        kv_dtype: DType | None = None,
        eff: Efficiencies = DEFAULT_EFFICIENCIES,
    ) -> None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        if tp > 1 and tp not in valid_tp_sizes(model):
            raise ValueError(
                f"tp={tp} does not split {model.name}'s {model.n_heads} heads / {model.n_kv_heads} KV heads; "
                f"valid: {valid_tp_sizes(model)}"
            )
        if tp > 1 and gpu.interconnect_bytes_s is None:
            raise ValueError(f"{gpu.name} has no GPU-to-GPU link in the catalog; use tp=1")
        kv = kv_dtype if kv_dtype is not None else default_kv_dtype(dtype)
        if not kv.kv_cache_ok:
            raise ValueError(f"KV cache cannot be stored as {kv.name}; use bf16, fp16 or fp8")
        self.model = model
        self.gpu = gpu
        self.dtype = dtype
        self.kv_dtype = kv
        self.tp = tp
        self.eff = eff

        self.weights_bytes = float(model.total_params) * dtype.bytes_per_param
        self.kv_bytes_per_token = model.kv_bytes_per_token(kv.bytes_per_param)
        # KV heads are split over the group, or replicated once tp exceeds their number.
        kv_heads_per_gpu = max(model.n_kv_heads / tp, 1.0)
        self.kv_bytes_per_token_per_gpu = 2.0 * model.n_layers * kv_heads_per_gpu * model.head_dim * kv.bytes_per_param

        peak = gpu.peak_flops(dtype.compute_class)
        self.peak_flops = peak
        bw = gpu.bandwidth_bytes_s * eff.bandwidth
        bpp = dtype.bytes_per_param
        read_params = model.total_params - (0 if model.tie_word_embeddings else model.embedding_params)
        # Precomputed per-GPU coefficients keep step_time_s to a handful of float operations.
        self._s_per_weight_byte = 1.0 / bw
        self._dense_read_bytes = (read_params - model.n_experts * model.expert_params) * bpp / tp
        self._dense_read_s = self._dense_read_bytes / bw
        self._expert_bytes = model.expert_params * bpp / tp
        self._n_experts = model.n_experts
        self._miss = 1.0 - model.experts_per_token / model.n_experts
        self._kv_s_per_token = self.kv_bytes_per_token_per_gpu / bw
        lin = 2.0 * model.layer_matmul_params_active / tp
        head = 2.0 * model.lm_head_params / tp
        self._lin_prefill_s_per_token = lin / (peak * eff.compute_prefill)
        self._lin_decode_s_per_token = (lin + head) / (peak * eff.compute_decode)
        att = 4.0 * model.n_layers * model.n_heads * model.head_dim / tp
        self._att_prefill_s_per_pair = att / (peak * eff.compute_prefill)
        self._att_decode_s_per_pair = att / (peak * eff.compute_decode)
        self._fixed_s = eff.step_overhead_s + model.n_layers * eff.per_layer_overhead_s
        if tp > 1 and gpu.interconnect_bytes_s is not None:
            link = gpu.interconnect_bytes_s * eff.interconnect
            per_token = 2 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES / link
            self._ar_s_per_token = 2 * model.n_layers * per_token
            self._ar_fixed_s = 2 * model.n_layers * eff.allreduce_latency_s
        else:
            self._ar_s_per_token = 0.0
            self._ar_fixed_s = 0.0

    # ---- step time -------------------------------------------------------------------------------------

    def _weights_read_s(self, tokens: int) -> float:
        if self._n_experts == 1:
            return self._dense_read_bytes * self._s_per_weight_byte
        touched = self._n_experts * (1.0 - self._miss**tokens)
        return (self._dense_read_bytes + touched * self._expert_bytes) * self._s_per_weight_byte

    def expected_experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per layer that `tokens` tokens route to (1 for dense models)."""
        if self._n_experts == 1:
            return 1.0
        return self._n_experts * (1.0 - self._miss**tokens)

    def breakdown(
        self, n_prefill_tokens: int, prefill_attn_pairs: float, n_decode: int, decode_kv_tokens: int
    ) -> StepBreakdown:
        """The terms of step_time_s (see the module docstring); an empty step takes no time."""
        if n_prefill_tokens < 0 or prefill_attn_pairs < 0 or n_decode < 0 or decode_kv_tokens < 0:
            raise ValueError(
                "step inputs must be >= 0, got "
                f"n_prefill_tokens={n_prefill_tokens} prefill_attn_pairs={prefill_attn_pairs} "
                f"n_decode={n_decode} decode_kv_tokens={decode_kv_tokens}"
            )
        tokens = n_prefill_tokens + n_decode
        if tokens == 0:
            return StepBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "memory")
        w = self._weights_read_s(tokens)
        lin = n_prefill_tokens * self._lin_prefill_s_per_token + n_decode * self._lin_decode_s_per_token
        kv = (decode_kv_tokens + tokens) * self._kv_s_per_token
        att = prefill_attn_pairs * self._att_prefill_s_per_pair + decode_kv_tokens * self._att_decode_s_per_pair
        ar = self._ar_fixed_s + tokens * self._ar_s_per_token if self._ar_fixed_s else 0.0
        total = max(w, lin) + max(kv, att) + self._fixed_s + ar
        bound = "compute" if lin + att > w + kv else "memory"
        return StepBreakdown(w, lin, kv, att, self._fixed_s, ar, total, bound)

    def step_time_s(
        self, n_prefill_tokens: int, prefill_attn_pairs: float, n_decode: int, decode_kv_tokens: int
    ) -> float:
        """Seconds for one engine step.

        n_prefill_tokens: new prompt tokens computed this step (sum over prefill chunks).
        prefill_attn_pairs: sum over chunks of chunk_len * (ctx_before + chunk_len / 2).
        n_decode: sequences decoding one token this step.
        decode_kv_tokens: sum of the context lengths of the decoding sequences (KV read).
        """
        tokens = n_prefill_tokens + n_decode
        if tokens <= 0 or n_prefill_tokens < 0 or n_decode < 0 or decode_kv_tokens < 0 or prefill_attn_pairs < 0:
            return self.breakdown(n_prefill_tokens, prefill_attn_pairs, n_decode, decode_kv_tokens).total_s
        w = self._dense_read_s if self._n_experts == 1 else self._weights_read_s(tokens)
        lin = n_prefill_tokens * self._lin_prefill_s_per_token + n_decode * self._lin_decode_s_per_token
        kv = (decode_kv_tokens + tokens) * self._kv_s_per_token
        att = prefill_attn_pairs * self._att_prefill_s_per_pair + decode_kv_tokens * self._att_decode_s_per_pair
        t = (w if w > lin else lin) + (kv if kv > att else att) + self._fixed_s
        if self._ar_fixed_s:
            t += self._ar_fixed_s + tokens * self._ar_s_per_token
        return t

    def decode_step_time_s(self, batch: int, context_len: int) -> float:
        """A pure decode step: `batch` sequences each holding `context_len` tokens of KV."""
        return self.step_time_s(0, 0.0, batch, batch * context_len)

    def prefill_time_s(self, prompt_len: int, chunk: int | None = None) -> float:
        """Time to prefill one prompt alone, in chunks of `chunk` tokens (None: one step)."""
        if prompt_len <= 0:
            raise ValueError(f"prompt_len must be > 0, got {prompt_len}")
        size = prompt_len if chunk is None else chunk
        if size <= 0:
            raise ValueError(f"chunk must be > 0, got {chunk}")
        total, done = 0.0, 0
        while done < prompt_len:
            c = min(size, prompt_len - done)
            total += self.step_time_s(c, c * (done + c / 2.0), 0, 0)
            done += c
        return total

    # ---- memory ----------------------------------------------------------------------------------------

    @property
    def weights_bytes_per_gpu(self) -> float:
        return self.weights_bytes / self.tp

    def runtime_reserve_bytes(self, max_num_batched_tokens: int = 8192) -> float:
        """Per-GPU memory held outside weights and KV (rule in the module docstring)."""
        m = self.model
        act = (
            max_num_batched_tokens
            * (3 * m.intermediate_size * m.experts_per_token / self.tp + 4 * m.hidden_size)
            * ACTIVATION_BYTES
        )
        logits = SAMPLER_ROWS * m.vocab_size * 4
        return NON_TORCH_RESERVE_BYTES + act + logits

    def kv_free_bytes_per_gpu(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192) -> float:
        """Memory left for KV on each GPU (negative when the model does not fit)."""
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        budget = self.gpu.memory_bytes * gpu_memory_utilization
        return budget - self.weights_bytes_per_gpu - self.runtime_reserve_bytes(max_num_batched_tokens)

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192) -> int:
        """Tokens of KV the group can hold; DoesNotFitError when weights + reserve exceed the budget."""
        free = self.kv_free_bytes_per_gpu(gpu_memory_utilization, max_num_batched_tokens)
        if free < self.kv_bytes_per_token_per_gpu:
            raise self._does_not_fit(free, gpu_memory_utilization, max_num_batched_tokens)
        return math.floor(free / self.kv_bytes_per_token_per_gpu)

    def fits(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192) -> bool:
        return self.kv_free_bytes_per_gpu(gpu_memory_utilization, max_num_batched_tokens) >= (
            self.kv_bytes_per_token_per_gpu
        )

    def _variant(self, dtype: DType | None = None, tp: int | None = None) -> StepTimeModel:
        return StepTimeModel(
            self.model,
            self.gpu,
            dtype if dtype is not None else self.dtype,
            tp=tp if tp is not None else self.tp,
            kv_dtype=self.kv_dtype,
            eff=self.eff,
        )

    def _does_not_fit(self, free: float, util: float, mnbt: int) -> DoesNotFitError:
        shortfall = (self.kv_bytes_per_token_per_gpu - free) / GIB
        suggestions: list[str] = []
        fitting_dtype: str | None = None
        for name in ("fp8", "int8", "int4", "q4_k_m"):
            candidate = get_dtype(name)
            if candidate.bytes_per_param >= self.dtype.bytes_per_param:
                continue
            variant = self._variant(dtype=candidate)
            if variant.fits(util, mnbt):
                fitting_dtype = name
                suggestions.append(
                    f"quantize to {name} ({variant.weights_bytes / GIB:.1f} GiB of weights, "
                    f"{variant.kv_capacity_tokens(util, mnbt)} KV tokens)"
                )
                break
        fitting_tp: int | None = None
        if self.gpu.interconnect_bytes_s is not None and not self.gpu.unified_memory:
            for tp in valid_tp_sizes(self.model):
                if tp <= self.tp:
                    continue
                variant = self._variant(tp=tp)
                if variant.fits(util, mnbt):
                    fitting_tp = tp
                    suggestions.append(
                        f"tensor parallel over {tp} x {self.gpu.name} (--tp {tp}; "
                        f"{variant.kv_capacity_tokens(util, mnbt)} KV tokens)"
                    )
                    break
        if util < 0.95:
            needed = (
                self.weights_bytes_per_gpu + self.runtime_reserve_bytes(mnbt) + self.kv_bytes_per_token_per_gpu
            ) / (self.gpu.memory_bytes)
            if needed <= 0.95:
                suggestions.append(f"raise gpu_memory_utilization to {math.ceil(needed * 100) / 100:.2f}")
        if not suggestions:
            suggestions.append("use a card with more memory")
        message = (
            f"{self.model.name} in {self.dtype.name} does not fit on {self.tp} x {self.gpu.name}: "
            f"{self.weights_bytes_per_gpu / GIB:.2f} GiB weights + "
            f"{self.runtime_reserve_bytes(mnbt) / GIB:.2f} GiB runtime reserve per GPU exceed "
            f"{self.gpu.memory_bytes * util / GIB:.2f} GiB "
            f"({util:.2f} of {self.gpu.memory_bytes / GIB:.0f} GiB); "
            f"short by {shortfall:.2f} GiB per GPU"
        )
        return DoesNotFitError(message, shortfall, suggestions, fitting_dtype, fitting_tp)

    def check_lengths(self, input_len: int, output_len: int) -> None:
        """Raise ValueError for non-positive lengths or a context beyond the model's maximum."""
        if input_len <= 0 or output_len <= 0:
            raise ValueError(f"input and output lengths must be > 0, got {input_len} and {output_len}")
        if input_len + output_len > self.model.max_context:
            raise ValueError(
                f"input {input_len} + output {output_len} = {input_len + output_len} tokens exceeds "
                f"{self.model.name}'s maximum context of {self.model.max_context}"
            )
