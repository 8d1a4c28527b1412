"""Engine knobs (vLLM's names and meanings) and the step-time seam the engine is timed by.

The engine never computes a step's duration itself: it asks a ``StepTimeModelLike`` (in practice
``llm_knee.plan.roofline.StepTimeModel``), so the same scheduler can be timed by the roofline model or
by a tiny pure function in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class StepTimeModelLike(Protocol):
    """What the engine needs from a step-time model (``plan.roofline.StepTimeModel`` fits)."""

    def step_time_s(
        self, n_prefill_tokens: int, prefill_attn_pairs: float, n_decode: int, decode_kv_tokens: int
    ) -> float: ...

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192) -> int: ...


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler and cache knobs, named as vLLM names them.

    Defaults follow vLLM's V1 engine for online serving: 256 sequences, an 8192-token step budget,
    chunked prefill on, 16-token KV blocks, 90 % of GPU memory. ``max_model_len`` caps prompt + output
    (None: the model's own maximum context).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = False
    prefix_hit_rate: float = 0.0  # fraction of requests whose shared prefix is already cached
    shared_prefix_tokens: int = 0  # length of the prefix those requests share
    scheduling_policy: str = "fcfs"  # a key of scheduler.SCHEDULING_POLICIES
    max_model_len: int | None = None
    # What happens when KV blocks run out: "preempt" (vLLM: recompute later) or "crash" (raise
    # KvExhaustedError, which serve-sim turns into a simulated CUDA OOM).
    on_kv_exhausted: str = "preempt"

    def validate(self) -> None:
        """Raise ValueError naming the knob when a value can never work."""
        from llm_knee.sim.scheduler import SCHEDULING_POLICIES

        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1 (got {self.max_num_seqs})")
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be at least 1 (got {self.max_num_batched_tokens})")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # Same rule as vLLM: every running sequence must be able to decode in one step.
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}): otherwise running sequences cannot all decode in one step; "
                "raise max_num_batched_tokens or lower max_num_seqs"
            )
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1 (got {self.block_size})")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1] (got {self.gpu_memory_utilization})")
        if not 0.0 <= self.prefix_hit_rate <= 1.0:
            raise ValueError(f"prefix_hit_rate must be in [0, 1] (got {self.prefix_hit_rate})")
        if self.shared_prefix_tokens < 0:
            raise ValueError(f"shared_prefix_tokens must be >= 0 (got {self.shared_prefix_tokens})")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            known = ", ".join(sorted(SCHEDULING_POLICIES))
            raise ValueError(f"unknown scheduling_policy {self.scheduling_policy!r}; known: {known}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be at least 2 (got {self.max_model_len})")
        if self.on_kv_exhausted not in ("preempt", "crash"):
            raise ValueError(f"on_kv_exhausted must be 'preempt' or 'crash' (got {self.on_kv_exhausted!r})")


class KvExhaustedError(RuntimeError):
    """KV blocks ran out while ``on_kv_exhausted="crash"``: the simulated process would OOM here."""
