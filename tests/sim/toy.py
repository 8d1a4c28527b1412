"""A tiny pure-function step-time model: the engine's scheduling is tested apart from the roofline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToyStepModel:
    """Step time = overhead + max(bytes / bandwidth, flops / peak): the roofline's shape, round numbers."""

    bandwidth: float = 1e12  # bytes/s
    weight_bytes: float = 4e9
    kv_bytes_per_token: float = 1e5
    flops_per_token: float = 8e9
    attn_flops_per_pair: float = 1e5
    peak_flops: float = 4e14
    overhead_s: float = 1e-3
    capacity_tokens: int = 50_000

    def step_time_s(
        self, n_prefill_tokens: int, prefill_attn_pairs: float, n_decode: int, decode_kv_tokens: int
    ) -> float:
        tokens = n_prefill_tokens + n_decode
        memory = (self.weight_bytes + (decode_kv_tokens + tokens) * self.kv_bytes_per_token) / self.bandwidth
        compute = (
            tokens * self.flops_per_token + (prefill_attn_pairs + decode_kv_tokens) * self.attn_flops_per_pair
        ) / self.peak_flops
        return self.overhead_s + max(memory, compute)

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192) -> int:
        return self.capacity_tokens
