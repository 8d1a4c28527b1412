"""The tiny random LLaMA GGUF: llama.* metadata, F16 weights, a tokenizer, and only word tokens generable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader

from llm_knee.engines.errors import ModelWriteError
from llm_knee.engines.tiny_gguf import BAN_WEIGHT, CHATML_TEMPLATE, parameter_count, write_tiny_llama_gguf
from llm_knee.engines.tiny_vocab import BYTE, CONTROL, SPACE, builtin_vocab, vocab_from_gguf
from llm_knee.workload.words import COMMON_WORDS


def _field(reader: GGUFReader, name: str) -> Any:
    return reader.fields[name].contents()


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "m.gguf"
    return write_tiny_llama_gguf(path, n_embd=64, n_layer=2, n_ff=96, n_head=4, n_head_kv=2, ctx=512, seed=7)


def test_metadata_describes_the_requested_llama_shape(small_model: Path) -> None:
    reader = GGUFReader(small_model)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.feed_forward_length") == 96
    assert _field(reader, "llama.attention.head_count") == 4
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "llama.context_length") == 512
    assert _field(reader, "llama.rope.dimension_count") == 16
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert _field(reader, "tokenizer.chat_template") == CHATML_TEMPLATE
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True


def test_weights_are_f16_matrices_and_f32_norms_with_grouped_kv_shapes(small_model: Path) -> None:
    reader = GGUFReader(small_model)
    tensors = {t.name: t for t in reader.tensors}
    n_vocab = builtin_vocab().size
    assert len(tensors) == 3 + 2 * 9
    # GGUF lists dimensions innermost first: (inputs, outputs).
    assert list(tensors["token_embd.weight"].shape) == [64, n_vocab]
    assert list(tensors["blk.1.attn_k.weight"].shape) == [64, 32]
    assert list(tensors["blk.0.ffn_down.weight"].shape) == [96, 64]
    for name, tensor in tensors.items():
        expected = GGMLQuantizationType.F32 if name.endswith("norm.weight") else GGMLQuantizationType.F16
        assert tensor.tensor_type == expected, name
    total = sum(int(np.prod(t.shape)) for t in tensors.values())
    assert total == parameter_count(n_embd=64, n_layer=2, n_ff=96, n_head=4, n_head_kv=2, n_vocab=n_vocab)


def test_only_space_word_tokens_can_win_the_output_projection(small_model: Path) -> None:
    reader = GGUFReader(small_model)
    vocab = builtin_vocab()
    out = {t.name: t for t in reader.tensors}["output.weight"].data.reshape(vocab.size, 64).astype(np.float32)
    allowed = sorted(vocab.generable)
    banned = np.setdiff1d(np.arange(vocab.size), allowed)
    assert np.all(out[banned, 0] == -BAN_WEIGHT)
    assert np.all(out[banned, 1:] == 0.0)
    assert np.all(out[allowed, 0] == 0.0)
    assert np.std(out[allowed, 1:]) == pytest.approx(0.02, rel=0.1)
    assert {vocab.tokens[i] for i in allowed} == {SPACE + w for w in COMMON_WORDS}


def test_same_arguments_give_the_same_bytes_and_another_seed_other_weights(tmp_path: Path) -> None:
    shape: dict[str, Any] = {"n_embd": 32, "n_layer": 1, "n_ff": 48, "n_head": 2, "n_head_kv": 2, "ctx": 64}
    a = write_tiny_llama_gguf(tmp_path / "a.gguf", seed=1, **shape).read_bytes()
    b = write_tiny_llama_gguf(tmp_path / "b.gguf", seed=1, **shape).read_bytes()
    c = write_tiny_llama_gguf(tmp_path / "c.gguf", seed=2, **shape).read_bytes()
    assert a == b
    assert a != c
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf", "c.gguf"]


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({"n_embd": 250, "n_head": 4}, "multiple of n_head"),
        ({"n_embd": 40, "n_head": 8}, "must be even"),
        ({"n_head": 4, "n_head_kv": 3}, "multiple of n_head_kv"),
        ({"n_layer": 0}, "n_layer must be at least 1"),
        ({"ctx": 8}, "ctx must be at least 16"),
    ],
)
def test_bad_shapes_are_refused_before_anything_is_written(tmp_path: Path, shape: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelWriteError, match=message):
        write_tiny_llama_gguf(tmp_path / "x.gguf", **shape)
    assert list(tmp_path.iterdir()) == []


def test_builtin_vocab_has_specials_byte_fallback_and_every_word_prefix() -> None:
    vocab = builtin_vocab()
    assert vocab.tokens[:3] == ("<unk>", "<s>", "</s>")
    assert vocab.types[1:3] == (CONTROL, CONTROL)
    assert [vocab.tokens[3 + b] for b in (0, 10, 255)] == ["<0x00>", "<0x0A>", "<0xFF>"]
    assert vocab.types.count(BYTE) == 256
    pieces = set(vocab.tokens)
    # llama.cpp's SentencePiece merge only forms pieces whose every left part is a piece too.
    for word in COMMON_WORDS:
        assert all(SPACE + word[:end] in pieces for end in range(1, len(word) + 1)), word
    assert len(pieces) == vocab.size


def test_vocab_read_back_from_a_gguf_equals_the_one_written(small_model: Path) -> None:
    written, read = builtin_vocab(), vocab_from_gguf(small_model)
    assert read.tokens == written.tokens
    assert read.types == written.types
    assert read.scores == written.scores
    assert read.generable == written.generable
    assert (read.bos_id, read.eos_id, read.unk_id) == (1, 2, 0)
    copied = {name for name, *_ in read.extra}
    assert "tokenizer.chat_template" not in copied
    assert "tokenizer.ggml.add_bos_token" in copied


def test_a_model_with_a_copied_vocab_keeps_its_tokenizer_keys(small_model: Path, tmp_path: Path) -> None:
    out = write_tiny_llama_gguf(tmp_path / "copy.gguf", n_embd=32, n_layer=1, n_ff=32, vocab_gguf=small_model)
    reader = GGUFReader(out)
    assert _field(reader, "tokenizer.ggml.tokens") == list(builtin_vocab().tokens)
    assert _field(reader, "tokenizer.ggml.add_space_prefix") is True


def test_a_file_that_is_not_gguf_is_refused_as_vocab(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelWriteError, match="cannot read vocabulary GGUF"):
        vocab_from_gguf(junk)
