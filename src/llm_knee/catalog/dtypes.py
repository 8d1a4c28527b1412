"""Storage formats of weights and KV cache, as effective bytes per parameter (or per cached element)."""

from __future__ import annotations

from dataclasses import dataclass

from llm_knee.catalog.errors import normalize_name, resolve_name, unknown_item_error


@dataclass(frozen=True)
class DType:
    """A storage format.

    bytes_per_param is the *effective* size including block scales, so that parameters x bytes_per_param is
    the size of the weights in memory. compute_class says which tensor-core peak runs the matmuls:
    "fp8" uses the card's FP8 peak where it has one; every other format (weight-only quantization included)
    is dequantized and multiplied at the 16-bit peak. kv_cache_ok says whether engines store KV in it.
    """

    name: str
    bytes_per_param: float
    note: str
    compute_class: str = "16bit"
    kv_cache_ok: bool = True


_DTYPES: tuple[DType, ...] = (
    DType("bf16", 2.0, "bfloat16, 16 bits"),
    DType("fp16", 2.0, "float16, 16 bits"),
    DType("fp32", 4.0, "float32, 32 bits"),
    DType("fp8", 1.0, "FP8 E4M3 with per-tensor/per-channel scales (negligible overhead)", "fp8"),
    DType("int8", 1.0, "INT8 weights with per-channel scales (negligible overhead); matmuls at 16-bit peak"),
    DType(
        "int4",
        4.125 / 8,
        "INT4 weights (GPTQ/AWQ) with one fp16 scale per group of 128: 4 + 16/128 = 4.125 bits/weight",
        kv_cache_ok=False,
    ),
    DType(
        "q8_0",
        8.5 / 8,
        "GGUF Q8_0: blocks of 32 int8 + one fp16 scale = 34 bytes / 32 weights = 8.5 bits/weight "
        "(ggml block_q8_0 layout)",
        kv_cache_ok=True,
    ),
    DType(
        "q4_k_m",
        4.89 / 8,
        "GGUF Q4_K_M: Q4_K blocks (4.5 bits/weight) with some tensors in Q6_K (6.5625 bits); whole-file "
        "effective 4.89 bits/weight for Llama-3-8B (llama.cpp tools/quantize README table)",
        kv_cache_ok=False,
    ),
)

_ALIASES: dict[str, str] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "fp8e4m3": "fp8",
    "e4m3": "fp8",
    "float8": "fp8",
    "w8a8": "int8",
    "awq": "int4",
    "gptq": "int4",
    "q4km": "q4_k_m",
    "ggufq4km": "q4_k_m",
    "q80": "q8_0",
    "ggufq80": "q8_0",
}


def list_dtypes() -> list[str]:
    return [d.name for d in _DTYPES]


def get_dtype(name: str) -> DType:
    """Look up a dtype by name ("bf16", "FP8", "q4_k_m", "Q4_K_M", "bfloat16", ...)."""
    key = normalize_name(name).replace(".", "")
    found = resolve_name(key, {normalize_name(d.name): d for d in _DTYPES}, _ALIASES)
    if found is None:
        raise unknown_item_error("dtype", name, [*list_dtypes(), *_ALIASES])
    return found
