"""Tiny tokenizers trained here on generated text, so the tests need no download.

- ``bytelevel``: GPT-2-style byte-level BPE; most common words are single tokens.
- ``metaspace``: SentencePiece-style BPE (``▁`` marks word starts, as in Llama 2 and Mistral).
- ``wordlevel``: one token per whitespace-separated word.
- ``pseudo``: byte-level BPE trained on made-up words only, so the common English word list is no use
  and prompts must be built from the tokenizer's own vocabulary.
- ``no_pretokenizer``: BPE with no pre-tokenizer at all, whose merges cross spaces, so joined words do
  not count independently and prompts need correcting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tokenizers import SentencePieceBPETokenizer, Tokenizer, decoders, models, pre_tokenizers, trainers

from llm_knee.workload.words import COMMON_WORDS


def _sentences(words: list[str], count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 16, size=count)
    return [" ".join(words[i] for i in rng.integers(0, len(words), size=n)) for n in lengths]


def _pseudo_words(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    return [
        "".join(syllables[i] for i in rng.integers(0, len(syllables), size=int(rng.integers(2, 4))))
        for _ in range(count)
    ]


def _train(kind: str) -> Tokenizer:
    english = _sentences(list(COMMON_WORDS), 600, seed=1)
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            show_progress=False,
            vocab_size=1500,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(english, trainer)
        return tok
    if kind == "metaspace":
        sp = SentencePieceBPETokenizer()
        sp.train_from_iterator(
            iter(english), vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
        )
        return Tokenizer.from_str(sp.to_str())
    if kind == "wordlevel":
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.decoder = decoders.WordPiece()  # joins tokens with spaces
        tok.train_from_iterator(english, trainers.WordLevelTrainer(special_tokens=["[UNK]"], show_progress=False))
        return tok
    if kind == "pseudo":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        pseudo = _sentences(_pseudo_words(300, seed=2), 600, seed=3)
        tok.train_from_iterator(
            pseudo,
            trainers.BpeTrainer(
                vocab_size=700, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
            ),
        )
        return tok
    if kind == "no_pretokenizer":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.decoder = decoders.Fuse()
        tok.train_from_iterator(
            english, trainers.BpeTrainer(vocab_size=800, special_tokens=["<unk>"], show_progress=False)
        )
        return tok
    raise ValueError(kind)


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tokenizer_path(kind)``: a tokenizer.json of that kind, trained once per test session."""
    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            folder = tmp_path_factory.mktemp(f"tok_{kind}")
            _train(kind).save(str(folder / "tokenizer.json"))
            made[kind] = folder / "tokenizer.json"
        return made[kind]

    return get
