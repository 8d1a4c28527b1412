"""Vocabularies for the tiny test model: a small built-in SentencePiece one, or one read from a GGUF.

Both kinds mark which tokens the model may *generate*: only ``▁<word>`` pieces of the common-word list
(:data:`llm_knee.workload.words.COMMON_WORDS`). Such a piece is whole UTF-8 text (so the server sends it
as its own stream chunk, never merged with the next token), cannot start a stop string such as
``<|im_end|>``, and is one token again when the output text is tokenized by any of the vocabularies
that word list was checked against.

The built-in vocabulary is SentencePiece-style for llama.cpp's ``llama`` tokenizer: ``<unk>``, ``<s>``,
``</s>``, 256 byte-fallback pieces, the printable ASCII characters, ``▁``, and every prefix of every
``▁<word>`` (llama.cpp merges adjacent symbols only into pieces that exist, so the prefixes are the
path by which ``▁`` ``t`` ``h`` ``e`` becomes ``▁the``). A prompt of N common words is then N tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from llm_knee.engines.errors import ModelWriteError
from llm_knee.workload.words import COMMON_WORDS

SPACE = "\u2581"  # SentencePiece's visible space

# llama.cpp token types (gguf.TokenType), repeated here so this module needs no gguf import.
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def require_gguf() -> ModuleType:
    """The ``gguf`` package (llama.cpp's gguf-py), imported on first use because it is a dev extra."""
    try:
        import gguf
    except ModuleNotFoundError as exc:
        raise ModelWriteError(
            "writing a GGUF model needs the 'gguf' package: pip install 'llm-knee[dev]' (or pip install gguf)"
        ) from exc
    return gguf


@dataclass(frozen=True)
class Vocab:
    """Token pieces with their scores and types, the special ids, and which ids may be generated."""

    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]
    bos_id: int
    eos_id: int
    unk_id: int
    generable: frozenset[int]
    # Extra ``tokenizer.*`` keys copied verbatim from a source GGUF: name -> (value, type, subtype).
    extra: tuple[tuple[str, Any, Any, Any], ...] = ()

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.scores) != n or len(self.types) != n:
            raise ModelWriteError(f"vocabulary lists disagree: {n} tokens, {len(self.scores)} scores, "
                                  f"{len(self.types)} types")  # fmt: skip
        if not self.generable:
            raise ModelWriteError("vocabulary has no token the model may generate (no '▁<common word>' piece)")

    @property
    def size(self) -> int:
        return len(self.tokens)


def builtin_vocab() -> Vocab:
    """The small self-contained SentencePiece-style vocabulary described in the module docstring."""
    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [UNKNOWN, CONTROL, CONTROL]
    scores: list[float] = [0.0, 0.0, 0.0]
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        types.append(BYTE)
        scores.append(0.0)
    seen: set[str] = set()

    def add(piece: str) -> None:
        if piece in seen:
            return
        seen.add(piece)
        tokens.append(piece)
        types.append(NORMAL)
        # Longer pieces score higher: merging prefers the longer match.
        scores.append(float(len(piece)))

    for code in range(0x21, 0x7F):
        add(chr(code))
    add(SPACE)
    for word in COMMON_WORDS:
        for end in range(1, len(word) + 1):
            add(SPACE + word[:end])
    index = {piece: i for i, piece in enumerate(tokens)}
    generable = frozenset(index[SPACE + word] for word in COMMON_WORDS)
    return Vocab(tuple(tokens), tuple(scores), tuple(types), bos_id=1, eos_id=2, unk_id=0, generable=generable)


def vocab_from_gguf(path: Path) -> Vocab:
    """Read the ``tokenizer.*`` keys of a vocabulary GGUF, e.g. llama.cpp's ``ggml-vocab-llama-spm.gguf``.

    The chat template of the source is dropped (the tiny model sets its own); every other
    ``tokenizer.*`` key is kept for copying.
    """
    gguf = require_gguf()
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise ModelWriteError(f"cannot read vocabulary GGUF {path}: {exc}") from exc
    fields = reader.fields

    def need(name: str) -> Any:
        if name not in fields:
            raise ModelWriteError(f"{path} has no {name}; it is not a vocabulary GGUF llama.cpp can use")
        return fields[name].contents()

    model = need("tokenizer.ggml.model")
    if model != "llama":
        raise ModelWriteError(f"{path} holds a {model!r} tokenizer; only SentencePiece ('llama') ones are supported")
    tokens = tuple(str(t) for t in need("tokenizer.ggml.tokens"))
    types = tuple(int(t) for t in need("tokenizer.ggml.token_type"))
    scores_field = fields.get("tokenizer.ggml.scores")
    scores = tuple(float(s) for s in scores_field.contents()) if scores_field else (0.0,) * len(tokens)
    index = {piece: i for i, piece in enumerate(tokens)}
    generable = frozenset(
        index[SPACE + word] for word in COMMON_WORDS if SPACE + word in index and types[index[SPACE + word]] == NORMAL
    )
    handled = {
        "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.model",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.chat_template",
    }  # fmt: skip
    extra: list[tuple[str, Any, Any, Any]] = []
    for name, field in fields.items():
        if not name.startswith("tokenizer.") or name in handled:
            continue
        main = field.types[0]
        sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
        extra.append((name, field.contents(), main, sub))
    return Vocab(
        tokens,
        scores,
        types,
        bos_id=int(need("tokenizer.ggml.bos_token_id")),
        eos_id=int(need("tokenizer.ggml.eos_token_id")),
        unk_id=int(fields["tokenizer.ggml.unknown_token_id"].contents())
        if "tokenizer.ggml.unknown_token_id" in fields
        else 0,
        generable=generable,
        extra=tuple(extra),
    )
