"""Loading local tokenizers, and the errors a user sees when the path is wrong."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from llm_knee.workload.errors import TokenizerError
from llm_knee.workload.lengths import parse
from llm_knee.workload.prompts import PromptSource
from llm_knee.workload.spec import WorkloadSpec
from llm_knee.workload.tokenizer import FitJob, WordVocab, load_tokenizer
from llm_knee.workload.words import COMMON_WORDS

TokPath = Callable[[str], Path]


def test_loads_a_tokenizer_json_file_or_a_directory_holding_one(tokenizer_path: TokPath) -> None:
    path = tokenizer_path("bytelevel")
    assert load_tokenizer(path).get_vocab_size() == load_tokenizer(path.parent).get_vocab_size() > 0
    assert load_tokenizer(str(path)).encode("the people").ids


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"no such file or directory; give a local tokenizer\.json"):
        load_tokenizer(tmp_path / "nope")


def test_directory_without_tokenizer_json_says_what_it_found(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.model").write_bytes(b"\x00")
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(tmp_path)
    message = str(info.value)
    assert "has no tokenizer.json" in message
    assert "found tokenizer.model, tokenizer_config.json" in message
    assert "save_pretrained" in message


def test_unreadable_tokenizer_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": 12}')
    with pytest.raises(TokenizerError, match="cannot read tokenizer"):
        load_tokenizer(bad)


def test_prompt_source_reports_a_bad_tokenizer_when_built(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no such file"):
        PromptSource(WorkloadSpec(tokenizer=str(tmp_path / "missing")))


def test_a_tokenizer_without_word_tokens_is_refused_with_a_reason(tmp_path: Path) -> None:
    digits = Tokenizer(models.WordLevel({str(i): i for i in range(10)} | {"[UNK]": 10}, unk_token="[UNK]"))
    digits.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    digits.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(TokenizerError, match="0 tokens that decode to a word of plain ASCII letters"):
        PromptSource(WorkloadSpec(tokenizer=str(tmp_path)))


def test_word_vocab_uses_common_words_when_known_else_the_tokenizers_own(tokenizer_path: TokPath) -> None:
    english = WordVocab(load_tokenizer(tokenizer_path("wordlevel")), preferred=COMMON_WORDS)
    assert set(english.words) == set(COMMON_WORDS)
    pseudo = WordVocab(load_tokenizer(tokenizer_path("pseudo")), preferred=COMMON_WORDS)
    assert not set(pseudo.words) <= set(COMMON_WORDS)
    assert set(pseudo.start_words) <= set(pseudo.words)
    text = PromptSource(WorkloadSpec(input_len=parse("200"), tokenizer=str(tokenizer_path("pseudo")))).next().text
    assert not set((text or "").split()) <= set(COMMON_WORDS)


def test_fit_corrects_a_first_try_that_misses_and_keeps_the_leading_words(tokenizer_path: TokPath) -> None:
    vocab = WordVocab(load_tokenizer(tokenizer_path("bytelevel")), preferred=COMMON_WORDS)
    lead = ["people", "water", "house"]
    for words, n in [(lead + ["the"] * 50, 10), (lead, 40), (lead + ["sentence"] * 5, 9)]:
        text, ids = vocab.fit(FitJob(list(words), n, keep=3, seed=(1,)))
        assert len(ids) == n == vocab.count(text)
        assert text.split(" ")[:3] == lead


def test_fit_refuses_an_impossible_length(tokenizer_path: TokPath) -> None:
    vocab = WordVocab(load_tokenizer(tokenizer_path("wordlevel")), preferred=COMMON_WORDS)
    with pytest.raises(TokenizerError, match="at least 1"):
        vocab.fit(FitJob([], 0))
