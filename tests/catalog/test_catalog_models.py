"""Model presets: exact architectures and parameter counts, HF config.json loading, unknown names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_knee.catalog import CatalogError, get_model, list_models, load_hf_config

# Published totals (model cards / safetensors index sizes), exact where the checkpoints give them.
PUBLISHED_TOTALS = {
    "Llama-2-7B": 6_738_415_616,
    "Llama-2-13B": 13_015_864_320,
    "Llama-2-70B": 68_976_648_192,
    "Llama-3.1-8B": 8_030_261_248,
    "Llama-3.1-70B": 70_553_706_496,
    "Qwen2.5-7B": 7_615_616_512,
    "Qwen2.5-72B": 72_706_203_648,
    "Mistral-7B": 7_241_732_096,
    "Mixtral-8x7B": 46_702_792_704,
}


@pytest.mark.parametrize(("name", "total"), sorted(PUBLISHED_TOTALS.items()))
def test_parameter_count_matches_published_total(name: str, total: int) -> None:
    assert get_model(name).total_params == total


def test_mixtral_active_parameters_are_two_of_eight_experts() -> None:
    m = get_model("Mixtral-8x7B")
    assert m.n_experts == 8 and m.experts_per_token == 2
    # 12.9B active: attention, router, norms, embeddings and 2 of the 8 expert MLPs.
    assert m.active_params == 12_879_925_248
    expert_mlp = 3 * 4096 * 14336
    assert m.total_params - m.active_params == 32 * 6 * expert_mlp
    assert m.expert_params == 32 * expert_mlp


def test_dense_models_have_all_parameters_active() -> None:
    for name in list_models():
        m = get_model(name)
        if m.n_experts == 1:
            assert m.active_params == m.total_params


def test_llama31_8b_architecture_from_config_json() -> None:
    m = get_model("Llama-3.1-8B")
    assert (m.n_layers, m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim) == (32, 4096, 32, 8, 128)
    assert (m.intermediate_size, m.vocab_size, m.max_context) == (14336, 128256, 131072)
    assert not m.tie_word_embeddings


def test_kv_bytes_per_token_counts_kv_heads_not_attention_heads() -> None:
    # GQA: 8 KV heads of 128 -> 2 * 32 * 8 * 128 * 2 B
    assert get_model("Llama-3.1-8B").kv_bytes_per_token(2) == 131072
    # No GQA: 32 KV heads
    assert get_model("Llama-2-7B").kv_bytes_per_token(2) == 524288
    # Qwen2.5-7B: 28 layers, 4 KV heads
    assert get_model("Qwen2.5-7B").kv_bytes_per_token(2) == 2 * 28 * 4 * 128 * 2
    # Llama-2-70B already had GQA (8 KV heads): a naive 64-head formula would be 8x too big.
    assert get_model("Llama-2-70B").kv_bytes_per_token(1) == 2 * 80 * 8 * 128


@pytest.mark.parametrize(
    "alias",
    ["llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct", "LLAMA_3.1_8B"],
)
def test_preset_aliases(alias: str) -> None:
    assert get_model(alias).name == "Llama-3.1-8B"


def test_unknown_model_lists_closest_names() -> None:
    with pytest.raises(CatalogError) as info:
        get_model("llama-3.2-8b")
    message = str(info.value)
    assert "llama-3.2-8b" in message
    assert "Llama-3.1-8B" in message


def _write_config(tmp_path: Path, cfg: dict[str, object]) -> Path:
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return model_dir


LLAMA_31_8B_CONFIG: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_local_config_json_matches_the_preset(tmp_path: Path) -> None:
    model_dir = _write_config(tmp_path, LLAMA_31_8B_CONFIG)
    for ref in (str(model_dir), str(model_dir / "config.json")):
        m = get_model(ref)
        assert m.name == "my-model"
        assert m.total_params == 8_030_261_248
        assert m.kv_bytes_per_token(2) == 131072
        assert "local" in m.source


def test_config_defaults_kv_heads_and_head_dim(tmp_path: Path) -> None:
    cfg = dict(LLAMA_31_8B_CONFIG)
    del cfg["num_key_value_heads"]
    cfg["vocab_size"] = 32000
    cfg["intermediate_size"] = 11008
    cfg["max_position_embeddings"] = 4096
    m = load_hf_config(_write_config(tmp_path, cfg))
    assert m.n_kv_heads == 32  # defaults to the attention heads
    assert m.head_dim == 128  # hidden / heads
    assert m.total_params == 6_738_415_616  # that is Llama-2-7B


def test_tied_embeddings_are_counted_once(tmp_path: Path) -> None:
    # Llama-3.2-1B: tied embeddings, 1,235,814,400 parameters.
    cfg = {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_hidden_layers": 16,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
    }
    m = load_hf_config(_write_config(tmp_path, cfg))
    assert m.total_params == 1_235_814_400


def test_qwen2_config_has_qkv_bias(tmp_path: Path) -> None:
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    }
    assert load_hf_config(_write_config(tmp_path, cfg)).total_params == 7_615_616_512


def test_mixtral_config_reads_experts(tmp_path: Path) -> None:
    cfg = dict(LLAMA_31_8B_CONFIG)
    cfg.update(
        model_type="mixtral",
        vocab_size=32000,
        max_position_embeddings=32768,
        num_local_experts=8,
        num_experts_per_tok=2,
    )
    m = load_hf_config(_write_config(tmp_path, cfg))
    assert (m.total_params, m.active_params) == (46_702_792_704, 12_879_925_248)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"model_type": "gpt2"}, "not supported"),
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"hidden_size": "4096"}, "hidden_size"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"num_key_value_heads": 7}, "multiple"),
    ],
)
def test_bad_config_is_rejected_with_the_field_named(tmp_path: Path, change: dict[str, object], fragment: str) -> None:
    cfg = dict(LLAMA_31_8B_CONFIG)
    cfg.update(change)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(CatalogError, match=fragment):
        load_hf_config(_write_config(tmp_path, cfg))


def test_directory_without_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"config\.json"):
        load_hf_config(tmp_path)
