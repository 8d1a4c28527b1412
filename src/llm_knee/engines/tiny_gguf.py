"""Write a tiny LLaMA-architecture GGUF with random F16 weights, for serving by llama.cpp in tests.

A load tester cares how an engine schedules and computes tokens, not what they say, so the weights are
random (normal, scale 0.02) and the model is made locally in a couple of seconds. It carries a
tokenizer (:mod:`llm_knee.engines.tiny_vocab`) and a ChatML chat template, so both
``/v1/completions`` and ``/v1/chat/completions`` work.

The model only ever generates ``▁<common word>`` tokens, each of which the server streams as its own
chunk (one chunk = one token). That is arranged in the weights rather than by the client's sampling
settings: dimension 0 of the residual stream holds a constant (the token embeddings have 1.0 there,
no block writes to it, and the blocks' input norms ignore it), so after the final norm it is a large
positive number for every position. Each banned token's output row is zero except for a large
negative weight on dimension 0, giving it a logit near -60, whatever the sampler does short of
forbidding the allowed tokens. The end-of-sequence token is banned too: a request always runs to
``max_tokens`` (or the context limit), which keeps output lengths exact.

Quantized weights are avoided on purpose: some VMs reject the AMX code llama.cpp uses for them.

Command line: ``python -m llm_knee.engines.tiny_gguf OUT.gguf [--n-embd 256 --n-layer 4 ...]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from llm_knee.engines.errors import ModelWriteError
from llm_knee.engines.tiny_vocab import Vocab, builtin_vocab, require_gguf, vocab_from_gguf

WEIGHT_SCALE = 0.02
ANCHOR = 1.0  # the constant in residual dimension 0
BAN_WEIGHT = 4.0  # times the normalised anchor (about 15): banned logits near -60
RMS_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

F16 = npt.NDArray[np.float16]


def write_tiny_llama_gguf(
    path: str | Path,
    *,
    n_embd: int = 256,
    n_layer: int = 4,
    n_ff: int = 768,
    n_head: int = 4,
    n_head_kv: int = 4,
    ctx: int = 4096,
    seed: int = 0,
    vocab_gguf: Path | None = None,
) -> Path:
    """Write the model to ``path`` (atomically) and return the path.

    ``vocab_gguf``: a vocabulary GGUF whose ``tokenizer.*`` keys to copy (for instance
    :func:`llm_knee.engines.llamacpp.cached_vocab`, llama.cpp's 32k SentencePiece vocabulary); ``None``
    uses the small built-in vocabulary. The same arguments always give the same file.
    """
    _check_shape(n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv, ctx=ctx)
    gguf = require_gguf()
    vocab = vocab_from_gguf(vocab_gguf) if vocab_gguf is not None else builtin_vocab()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    head_dim = n_embd // n_head
    writer = gguf.GGUFWriter(partial, "llama")
    try:
        writer.add_name("llm-knee tiny random llama")
        writer.add_context_length(ctx)
        writer.add_embedding_length(n_embd)
        writer.add_block_count(n_layer)
        writer.add_feed_forward_length(n_ff)
        writer.add_head_count(n_head)
        writer.add_head_count_kv(n_head_kv)
        writer.add_rope_dimension_count(head_dim)
        writer.add_rope_freq_base(ROPE_FREQ_BASE)
        writer.add_layer_norm_rms_eps(RMS_EPS)
        writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
        writer.add_vocab_size(vocab.size)
        _add_tokenizer(writer, vocab)
        writer.add_chat_template(CHATML_TEMPLATE)
        for name, tensor in _tensors(vocab, n_embd, n_layer, n_ff, n_head_kv * head_dim, seed):
            writer.add_tensor(name, tensor)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    writer.close()
    os.replace(partial, path)
    return path


def parameter_count(*, n_embd: int, n_layer: int, n_ff: int, n_head: int, n_head_kv: int, n_vocab: int) -> int:
    """Number of weights of the model :func:`write_tiny_llama_gguf` writes with these sizes."""
    n_embd_kv = n_head_kv * (n_embd // n_head)
    per_block = 2 * n_embd + 2 * n_embd * n_embd + 2 * n_embd * n_embd_kv + 3 * n_embd * n_ff
    return 2 * n_vocab * n_embd + n_embd + n_layer * per_block


def _check_shape(*, n_embd: int, n_layer: int, n_ff: int, n_head: int, n_head_kv: int, ctx: int) -> None:
    problems: list[str] = []
    least = {"n_embd": 8, "n_layer": 1, "n_ff": 1, "n_head": 1, "n_head_kv": 1, "ctx": 16}
    given = {
        "n_embd": n_embd,
        "n_layer": n_layer,
        "n_ff": n_ff,
        "n_head": n_head,
        "n_head_kv": n_head_kv,
        "ctx": ctx,
    }
    for name, value in given.items():
        if value < least[name]:
            problems.append(f"{name} must be at least {least[name]}, got {value}")
    if not problems:
        if n_embd % n_head:
            problems.append(f"n_embd {n_embd} must be a multiple of n_head {n_head}")
        elif (n_embd // n_head) % 2:
            problems.append(f"head size n_embd/n_head = {n_embd // n_head} must be even (rotary embedding)")
        if n_head % n_head_kv:
            problems.append(f"n_head {n_head} must be a multiple of n_head_kv {n_head_kv}")
    if problems:
        raise ModelWriteError("bad tiny model shape: " + "; ".join(problems))


def _add_tokenizer(w: Any, vocab: Vocab) -> None:
    w.add_tokenizer_model("llama")
    w.add_token_list(list(vocab.tokens))
    w.add_token_scores(list(vocab.scores))
    w.add_token_types(list(vocab.types))
    w.add_bos_token_id(vocab.bos_id)
    w.add_eos_token_id(vocab.eos_id)
    w.add_unk_token_id(vocab.unk_id)
    copied: set[str] = set()
    for name, value, vtype, sub_type in vocab.extra:
        w.add_key_value(name, value, vtype, sub_type=sub_type)
        copied.add(name)
    if "tokenizer.ggml.add_bos_token" not in copied:
        w.add_add_bos_token(True)
    if "tokenizer.ggml.add_eos_token" not in copied:
        w.add_add_eos_token(False)
    if "tokenizer.ggml.add_space_prefix" not in copied:
        w.add_add_space_prefix(True)


def _tensors(
    vocab: Vocab, n_embd: int, n_layer: int, n_ff: int, n_embd_kv: int, seed: int
) -> list[tuple[str, npt.NDArray[np.float16] | npt.NDArray[np.float32]]]:
    """Named tensors in llama.cpp's layout: numpy shape (rows = outputs, columns = inputs)."""
    rng = np.random.default_rng(seed)

    def normal(rows: int, cols: int) -> F16:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * WEIGHT_SCALE).astype(np.float16)

    def block_norm() -> npt.NDArray[np.float32]:
        weight = np.ones(n_embd, dtype=np.float32)
        weight[0] = 0.0  # the blocks do not see the anchor dimension
        return weight

    n_vocab = vocab.size
    embeddings = normal(n_vocab, n_embd)
    embeddings[:, 0] = ANCHOR
    output = normal(n_vocab, n_embd)
    output[:, 0] = 0.0
    banned = np.ones(n_vocab, dtype=bool)
    banned[list(vocab.generable)] = False
    output[banned, :] = 0.0
    output[banned, 0] = -BAN_WEIGHT

    tensors: list[tuple[str, npt.NDArray[np.float16] | npt.NDArray[np.float32]]] = [
        ("token_embd.weight", embeddings),
        ("output_norm.weight", np.ones(n_embd, dtype=np.float32)),
        ("output.weight", output),
    ]
    for i in range(n_layer):
        attn_out = normal(n_embd, n_embd)
        attn_out[0, :] = 0.0  # nothing is added to the anchor dimension
        ffn_down = normal(n_embd, n_ff)
        ffn_down[0, :] = 0.0
        tensors += [
            (f"blk.{i}.attn_norm.weight", block_norm()),
            (f"blk.{i}.attn_q.weight", normal(n_embd, n_embd)),
            (f"blk.{i}.attn_k.weight", normal(n_embd_kv, n_embd)),
            (f"blk.{i}.attn_v.weight", normal(n_embd_kv, n_embd)),
            (f"blk.{i}.attn_output.weight", attn_out),
            (f"blk.{i}.ffn_norm.weight", block_norm()),
            (f"blk.{i}.ffn_gate.weight", normal(n_ff, n_embd)),
            (f"blk.{i}.ffn_up.weight", normal(n_ff, n_embd)),
            (f"blk.{i}.ffn_down.weight", ffn_down),
        ]
    return tensors


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_knee.engines.tiny_gguf", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the .gguf file to write")
    parser.add_argument("--n-embd", type=int, default=256)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-ff", type=int, default=768)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-head-kv", type=int, default=4)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-gguf", type=Path, help="copy the tokenizer of this GGUF (default: built-in)")
    args = parser.parse_args(argv)
    try:
        path = write_tiny_llama_gguf(
            args.out, n_embd=args.n_embd, n_layer=args.n_layer, n_ff=args.n_ff, n_head=args.n_head,
            n_head_kv=args.n_head_kv, ctx=args.ctx, seed=args.seed, vocab_gguf=args.vocab_gguf,
        )  # fmt: skip
    except ModelWriteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
