"""Decoder-only transformer architectures: built-in presets and local Hugging Face config.json files.

Parameter count of a Llama-family model (llama, mistral, qwen2, mixtral), exactly as the checkpoints hold it:

    q_dim   = n_heads * head_dim          kv_dim = n_kv_heads * head_dim
    attn    = hidden*q_dim (q) + 2*hidden*kv_dim (k, v) + q_dim*hidden (o)
              + [q_dim + 2*kv_dim if the q/k/v projections carry a bias (qwen2)]
    mlp     = 3 * hidden * intermediate    (gate, up, down; SwiGLU)            per expert
    router  = hidden * n_experts           (MoE only)
    norms   = 2 * hidden                   (input and post-attention RMSNorm)
    layer   = attn + n_experts * mlp + router + norms
    total   = n_layers * layer + vocab*hidden (embedding) + hidden (final norm)
              + vocab*hidden (lm_head, only when tie_word_embeddings is false)
    active  = total - n_layers * (n_experts - experts_per_token) * mlp

Checked against the published totals in tests/catalog/test_models.py (Llama-3.1-8B 8,030,261,248;
Llama-2-7B 6,738,415,616; Mixtral-8x7B 46,702,792,704 total / 12,879,925,248 active; ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_knee.catalog.errors import CatalogError, normalize_name, resolve_name, unknown_item_error


@dataclass(frozen=True)
class ModelSpec:
    name: str
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_context: int
    total_params: int
    active_params: int
    n_experts: int = 1
    experts_per_token: int = 1
    source: str = ""
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    sliding_window: int | None = None

    def kv_bytes_per_token(self, kv_bytes_per_elem: float) -> float:
        """K and V for every layer: 2 * layers * kv_heads * head_dim * bytes (GQA: kv_heads < heads)."""
        return 2.0 * self.n_layers * self.n_kv_heads * self.head_dim * kv_bytes_per_elem

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @property
    def embedding_params(self) -> int:
        """The input embedding table (vocab x hidden): a lookup, no matmul FLOPs."""
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection; shares the embedding table when tied (still one matmul per logit row)."""
        return self.vocab_size * self.hidden_size

    @property
    def expert_params(self) -> int:
        """Parameters of one expert's MLP summed over all layers (0 for dense models)."""
        return self.n_layers * 3 * self.hidden_size * self.intermediate_size if self.is_moe else 0

    @property
    def layer_matmul_params_active(self) -> int:
        """Matmul weights one token touches in the decoder layers (attention + its top-k experts + router)."""
        stored_head = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.active_params - self.embedding_params - stored_head - self.hidden_size * (2 * self.n_layers + 1)


def count_params(
    *,
    n_layers: int,
    hidden_size: int,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    intermediate_size: int,
    vocab_size: int,
    tie_word_embeddings: bool,
    attention_bias: bool = False,
    n_experts: int = 1,
    experts_per_token: int = 1,
) -> tuple[int, int]:
    """(total, active) parameters by the formula in the module docstring."""
    q_dim = n_heads * head_dim
    kv_dim = n_kv_heads * head_dim
    attn = hidden_size * q_dim + 2 * hidden_size * kv_dim + q_dim * hidden_size
    if attention_bias:
        attn += q_dim + 2 * kv_dim
    mlp = 3 * hidden_size * intermediate_size
    router = hidden_size * n_experts if n_experts > 1 else 0
    layer = attn + n_experts * mlp + router + 2 * hidden_size
    total = n_layers * layer + vocab_size * hidden_size + hidden_size
    if not tie_word_embeddings:
        total += vocab_size * hidden_size
    active = total - n_layers * (n_experts - experts_per_token) * mlp
    return total, active


def _make(
    name: str,
    *,
    n_layers: int,
    hidden_size: int,
    n_heads: int,
    n_kv_heads: int,
    intermediate_size: int,
    vocab_size: int,
    max_context: int,
    source: str,
    head_dim: int | None = None,
    tie_word_embeddings: bool = False,
    attention_bias: bool = False,
    n_experts: int = 1,
    experts_per_token: int = 1,
    sliding_window: int | None = None,
) -> ModelSpec:
    for field_name, value in (
        ("num_hidden_layers", n_layers),
        ("hidden_size", hidden_size),
        ("num_attention_heads", n_heads),
        ("num_key_value_heads", n_kv_heads),
        ("intermediate_size", intermediate_size),
        ("vocab_size", vocab_size),
        ("max_position_embeddings", max_context),
        ("num_local_experts", n_experts),
        ("num_experts_per_tok", experts_per_token),
    ):
        if value <= 0:
            raise CatalogError(f"{name}: {field_name} must be a positive integer, got {value}")
    if head_dim is None:
        if hidden_size % n_heads:
            raise CatalogError(f"{name}: hidden_size {hidden_size} is not a multiple of heads {n_heads}; set head_dim")
        head_dim = hidden_size // n_heads
    if n_heads % n_kv_heads:
        raise CatalogError(f"{name}: num_attention_heads {n_heads} is not a multiple of kv heads {n_kv_heads}")
    if experts_per_token > n_experts:
        raise CatalogError(f"{name}: num_experts_per_tok {experts_per_token} exceeds experts {n_experts}")
    total, active = count_params(
        n_layers=n_layers,
        hidden_size=hidden_size,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate_size,
        vocab_size=vocab_size,
        tie_word_embeddings=tie_word_embeddings,
        attention_bias=attention_bias,
        n_experts=n_experts,
        experts_per_token=experts_per_token,
    )
    return ModelSpec(
        name=name,
        n_layers=n_layers,
        hidden_size=hidden_size,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate_size,
        vocab_size=vocab_size,
        max_context=max_context,
        total_params=total,
        active_params=active,
        n_experts=n_experts,
        experts_per_token=experts_per_token,
        source=source,
        tie_word_embeddings=tie_word_embeddings,
        attention_bias=attention_bias,
        sliding_window=sliding_window,
    )


def _hf(repo: str) -> str:
    return f"config.json of https://huggingface.co/{repo}"


_PRESETS: tuple[ModelSpec, ...] = (
    _make(
        "Llama-2-7B",
        n_layers=32,
        hidden_size=4096,
        n_heads=32,
        n_kv_heads=32,
        intermediate_size=11008,
        vocab_size=32000,
        max_context=4096,
        source=_hf("meta-llama/Llama-2-7b-hf"),
    ),
    _make(
        "Llama-2-13B",
        n_layers=40,
        hidden_size=5120,
        n_heads=40,
        n_kv_heads=40,
        intermediate_size=13824,
        vocab_size=32000,
        max_context=4096,
        source=_hf("meta-llama/Llama-2-13b-hf"),
    ),
    _make(
        "Llama-2-70B",
        n_layers=80,
        hidden_size=8192,
        n_heads=64,
        n_kv_heads=8,
        intermediate_size=28672,
        vocab_size=32000,
        max_context=4096,
        source=_hf("meta-llama/Llama-2-70b-hf"),
    ),
    _make(
        "Llama-3.1-8B",
        n_layers=32,
        hidden_size=4096,
        n_heads=32,
        n_kv_heads=8,
        intermediate_size=14336,
        vocab_size=128256,
        max_context=131072,
        source=_hf("meta-llama/Llama-3.1-8B-Instruct"),
    ),
    _make(
        "Llama-3.1-70B",
        n_layers=80,
        hidden_size=8192,
        n_heads=64,
        n_kv_heads=8,
        intermediate_size=28672,
        vocab_size=128256,
        max_context=131072,
        source=_hf("meta-llama/Llama-3.1-70B-Instruct"),
    ),
    _make(
        "Qwen2.5-7B",
        n_layers=28,
        hidden_size=3584,
        n_heads=28,
        n_kv_heads=4,
        intermediate_size=18944,
        vocab_size=152064,
        max_context=32768,
        attention_bias=True,
        source=_hf("Qwen/Qwen2.5-7B-Instruct") + " (the base model's file says 131072 positions)",
    ),
    _make(
        "Qwen2.5-72B",
        n_layers=80,
        hidden_size=8192,
        n_heads=64,
        n_kv_heads=8,
        intermediate_size=29568,
        vocab_size=152064,
        max_context=32768,
        attention_bias=True,
        source=_hf("Qwen/Qwen2.5-72B-Instruct") + " (the base model's file says 131072 positions)",
    ),
    _make(
        "Mistral-7B",
        n_layers=32,
        hidden_size=4096,
        n_heads=32,
        n_kv_heads=8,
        intermediate_size=14336,
        vocab_size=32000,
        max_context=32768,
        sliding_window=4096,
        source=_hf("mistralai/Mistral-7B-v0.1") + " (v0.3 has vocab 32768 and no sliding window)",
    ),
    _make(
        "Mixtral-8x7B",
        n_layers=32,
        hidden_size=4096,
        n_heads=32,
        n_kv_heads=8,
        intermediate_size=14336,
        vocab_size=32000,
        max_context=32768,
        n_experts=8,
        experts_per_token=2,
        source=_hf("mistralai/Mixtral-8x7B-v0.1"),
    ),
)

_ALIASES: dict[str, str] = {
    "llama27b": "Llama-2-7B",
    "llama213b": "Llama-2-13B",
    "llama270b": "Llama-2-70B",
    "llama3.18b": "Llama-3.1-8B",
    "llama38b": "Llama-3.1-8B",
    "llama3.170b": "Llama-3.1-70B",
    "llama370b": "Llama-3.1-70B",
    "qwen2.57b": "Qwen2.5-7B",
    "qwen2.572b": "Qwen2.5-72B",
    "mistral7b": "Mistral-7B",
    "mistral7bv0.1": "Mistral-7B",
    "mixtral8x7b": "Mixtral-8x7B",
    "mixtral8x7bv0.1": "Mixtral-8x7B",
}

# Suffixes of published repo names that do not change the architecture.
_VARIANT_SUFFIXES = ("instruct", "chat", "hf", "base", "v0.1", "fp8", "awq", "gptq")

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "mixtral")


def list_models() -> list[str]:
    return [m.name for m in _PRESETS]


def _preset_key(name: str) -> str:
    key = normalize_name(name.rsplit("/", 1)[-1])
    stripped = True
    while stripped:
        stripped = False
        for suffix in _VARIANT_SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                key = key[: -len(suffix)]
                stripped = True
    return key


def get_model(name_or_path: str) -> ModelSpec:
    """A preset by name ("Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", "mixtral-8x7b"), or a local HF
    model: a directory holding config.json, or the path of a config.json itself."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix == ".json"):
        return load_hf_config(path)
    by_key = {normalize_name(m.name): m for m in _PRESETS}
    for key in (normalize_name(name_or_path), _preset_key(name_or_path)):
        if (found := resolve_name(key, by_key, _ALIASES)) is not None:
            return found
    raise unknown_item_error(
        "model (not a preset, nor a local directory with config.json)", name_or_path, list_models()
    )


def _int_field(cfg: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise CatalogError(f"{where}: required field {key!r} is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise CatalogError(f"{where}: field {key!r} must be an integer, got {value!r}")
    return value


def load_hf_config(path: Path | str) -> ModelSpec:
    """Read a Hugging Face config.json (llama, mistral, qwen2, mixtral) into a ModelSpec.

    Defaults follow transformers' config classes: num_key_value_heads = num_attention_heads, head_dim =
    hidden_size / num_attention_heads, tie_word_embeddings = False (all four classes override the base
    class's True). qwen2 always has q/k/v biases; llama has them when attention_bias is true.
    """
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise CatalogError(f"{path}: no config.json found there")
    try:
        cfg = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"{file}: not a readable JSON file ({exc})") from exc
    if not isinstance(cfg, dict):
        raise CatalogError(f"{file}: expected a JSON object")
    where = str(file)
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CatalogError(
            f"{where}: model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if cfg.get("mlp_bias"):
        raise CatalogError(f"{where}: mlp_bias=true is not modelled (no supported preset uses it)")
    heads = _int_field(cfg, "num_attention_heads", where)
    hidden = _int_field(cfg, "hidden_size", where)
    head_dim_raw = cfg.get("head_dim")
    head_dim = None if head_dim_raw is None else _int_field(cfg, "head_dim", where)
    is_moe = model_type == "mixtral"
    sliding = cfg.get("sliding_window")
    use_sliding = cfg.get("use_sliding_window", model_type == "mistral")
    name = file.parent.name or file.stem
    return _make(
        name,
        n_layers=_int_field(cfg, "num_hidden_layers", where),
        hidden_size=hidden,
        n_heads=heads,
        n_kv_heads=_int_field(cfg, "num_key_value_heads", where, default=heads),
        head_dim=head_dim,
        intermediate_size=_int_field(cfg, "intermediate_size", where),
        vocab_size=_int_field(cfg, "vocab_size", where),
        max_context=_int_field(cfg, "max_position_embeddings", where),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=model_type == "qwen2" or bool(cfg.get("attention_bias", False)),
        n_experts=_int_field(cfg, "num_local_experts", where) if is_moe else 1,
        experts_per_token=_int_field(cfg, "num_experts_per_tok", where) if is_moe else 1,
        sliding_window=sliding if isinstance(sliding, int) and use_sliding else None,
        source=f"local {file}",
    )
