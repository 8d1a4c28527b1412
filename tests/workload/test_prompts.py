"""Generated prompts: exact lengths with a tokenizer, unique openings, shared prefixes, determinism."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from llm_knee.workload.errors import TokenizerError, WorkloadError
from llm_knee.workload.lengths import LengthDist, parse
from llm_knee.workload.prompts import Prompt, PromptSource
from llm_knee.workload.spec import WorkloadSpec
from llm_knee.workload.words import COMMON_WORDS, START_WORDS

TokPath = Callable[[str], Path]
# The tokenizers trained in conftest.py.
TOKENIZER_KINDS = ("bytelevel", "metaspace", "wordlevel", "pseudo", "no_pretokenizer")
HEAD = 4  # head words for the built-in word list (432 start words: 432**4 >= 2**32)


def ids(tok: Tokenizer, prompt: Prompt) -> list[int]:
    assert prompt.text is not None
    encoded: list[int] = tok.encode(prompt.text, add_special_tokens=False).ids
    return encoded


# --- without a tokenizer ---------------------------------------------------------------------------


def test_approximate_prompts_have_one_common_word_per_counted_token() -> None:
    source = PromptSource(WorkloadSpec(input_len=parse("uniform:1,300"), output_len=parse("normal:100,20")))
    for prompt in source.take(300):
        assert prompt.text is not None and prompt.messages is None
        words = prompt.text.split(" ")
        assert len(words) == prompt.prompt_tokens
        assert 1 <= prompt.prompt_tokens <= 300
        assert words[0] in START_WORDS
        assert set(words) <= set(COMMON_WORDS)
        assert prompt.exact is False
        assert prompt.output_tokens >= 1


def test_every_prompt_opens_differently() -> None:
    prompts = PromptSource(WorkloadSpec(input_len=parse("64"))).take(20_000)
    openings = [tuple(p.text.split(" ")[:HEAD]) for p in prompts if p.text]
    assert len(set(openings)) == len(prompts)
    # The very first word already differs between any two of 432 consecutive prompts.
    assert len({o[0] for o in openings[:432]}) == 432


def test_openings_stay_unique_across_workers_sharing_one_workload() -> None:
    spec = WorkloadSpec(input_len=parse("16"), seed=5)
    openings = [
        tuple((p.text or "").split(" ")[:HEAD])
        for worker in range(3)
        for p in PromptSource(spec, worker=worker, workers=3).take(2000)
    ]
    assert len(set(openings)) == len(openings)


def test_shared_prefix_is_the_same_words_then_each_prompt_is_unique() -> None:
    k = 40
    prompts = PromptSource(WorkloadSpec(input_len=parse("uniform:41,200"), shared_prefix_tokens=k)).take(3000)
    splits = [(p.text or "").split(" ") for p in prompts]
    assert len({tuple(s[:k]) for s in splits}) == 1
    assert len({tuple(s[k : k + HEAD]) for s in splits}) == len(prompts)
    assert all(len(s) == p.prompt_tokens for s, p in zip(splits, prompts, strict=True))


def test_normal_lengths_shorter_than_the_prefix_are_raised_above_it() -> None:
    spec = WorkloadSpec(input_len=parse("normal:30,40"), shared_prefix_tokens=20)
    assert min(p.prompt_tokens for p in PromptSource(spec).take(500)) == 21


def test_chat_api_puts_the_text_in_one_user_message() -> None:
    completions = PromptSource(WorkloadSpec(input_len=parse("32"))).next()
    chat = PromptSource(WorkloadSpec(input_len=parse("32"), api="chat")).next()
    assert chat.text is None
    assert chat.messages == [{"role": "user", "content": completions.text}]
    assert chat.prompt_tokens == completions.prompt_tokens == 32


def test_same_seed_same_prompts_other_seed_other_prompts() -> None:
    spec = WorkloadSpec(input_len=parse("uniform:5,50"), output_len=parse("uniform:1,500"), seed=11)
    first, again = PromptSource(spec).take(200), PromptSource(spec).take(200)
    assert first == again
    other = PromptSource(WorkloadSpec(input_len=spec.input_len, output_len=spec.output_len, seed=12)).take(200)
    assert [p.text for p in other] != [p.text for p in first]


def test_take_equals_repeated_next() -> None:
    spec = WorkloadSpec(input_len=parse("normal:60,20"), seed=3)
    source = PromptSource(spec)
    assert PromptSource(spec).take(50) == [source.next() for _ in range(50)]
    assert list(zip(range(3), PromptSource(spec), strict=False))[2][1] == PromptSource(spec).take(3)[2]


def test_output_length_does_not_change_the_prompts() -> None:
    a = PromptSource(WorkloadSpec(input_len=parse("uniform:5,50"), output_len=parse("100"))).take(50)
    b = PromptSource(WorkloadSpec(input_len=parse("uniform:5,50"), output_len=parse("uniform:1,9"))).take(50)
    assert [p.text for p in a] == [p.text for p in b]
    assert {p.output_tokens for p in a} == {100}
    assert all(1 <= p.output_tokens <= 9 for p in b)


def test_worker_arguments_are_checked() -> None:
    with pytest.raises(WorkloadError, match="worker must be in"):
        PromptSource(WorkloadSpec(), worker=2, workers=2)


# --- with a tokenizer ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=1, max_value=2000), seed=st.integers(0, 1000))
def test_prompts_have_exactly_the_requested_token_count(tokenizer_path: TokPath, kind: str, n: int, seed: int) -> None:
    path = tokenizer_path(kind)
    tok = Tokenizer.from_file(str(path))
    source = PromptSource(WorkloadSpec(input_len=LengthDist.fixed(n), tokenizer=str(path), seed=seed))
    for prompt in source.take(3):
        assert prompt.exact is True
        assert prompt.prompt_tokens == n
        assert len(ids(tok, prompt)) == n


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_varied_lengths_are_exact_and_match_what_next_gives(tokenizer_path: TokPath, kind: str) -> None:
    path = tokenizer_path(kind)
    tok = Tokenizer.from_file(str(path))
    spec = WorkloadSpec(input_len=parse("uniform:1,700"), tokenizer=str(path), seed=9)
    batch = PromptSource(spec).take(60)
    source = PromptSource(spec)
    assert [source.next() for _ in range(60)] == batch
    assert all(len(ids(tok, p)) == p.prompt_tokens for p in batch)


@pytest.mark.parametrize("kind", ["bytelevel", "metaspace", "wordlevel", "pseudo"])
def test_prompts_are_unique_from_their_first_tokens(tokenizer_path: TokPath, kind: str) -> None:
    path = tokenizer_path(kind)
    tok = Tokenizer.from_file(str(path))
    prompts = PromptSource(WorkloadSpec(input_len=parse("24"), tokenizer=str(path))).take(3000)
    heads = [tuple(ids(tok, p)[:8]) for p in prompts]
    assert len(set(heads)) == len(prompts)
    assert len({h[0] for h in heads[:20]}) == 20


@pytest.mark.parametrize("kind", ["bytelevel", "metaspace", "wordlevel", "pseudo"])
def test_shared_prefix_tokens_are_shared_and_the_rest_unique(tokenizer_path: TokPath, kind: str) -> None:
    path = tokenizer_path(kind)
    tok = Tokenizer.from_file(str(path))
    k = 100
    spec = WorkloadSpec(input_len=parse("uniform:101,400"), tokenizer=str(path), shared_prefix_tokens=k, seed=4)
    prompts = PromptSource(spec).take(1000)
    encoded = [ids(tok, p) for p in prompts]
    assert len({tuple(e[:k]) for e in encoded}) == 1
    assert len({tuple(e[k : k + 8]) for e in encoded}) == len(prompts)
    assert all(len(e) == p.prompt_tokens for e, p in zip(encoded, prompts, strict=True))
    # Workers share the same prefix.
    other = PromptSource(spec, worker=1, workers=2).next()
    assert ids(tok, other)[:k] == encoded[0][:k]


def test_a_tokenizer_whose_merges_cross_spaces_cannot_share_a_prefix(tokenizer_path: TokPath) -> None:
    spec = WorkloadSpec(
        input_len=parse("200"), tokenizer=str(tokenizer_path("no_pretokenizer")), shared_prefix_tokens=50
    )
    with pytest.raises(TokenizerError, match="does not keep its tokens when text follows it"):
        PromptSource(spec)


@pytest.mark.parametrize("kind", ["bytelevel", "pseudo"])
def test_tokenizer_prompts_are_deterministic_by_seed(tokenizer_path: TokPath, kind: str) -> None:
    path = str(tokenizer_path(kind))
    spec = WorkloadSpec(input_len=parse("normal:200,80"), tokenizer=path, shared_prefix_tokens=20, seed=21)
    assert PromptSource(spec).take(40) == PromptSource(spec).take(40)
    other = WorkloadSpec(input_len=spec.input_len, tokenizer=path, shared_prefix_tokens=20, seed=22)
    assert [p.text for p in PromptSource(other).take(40)] != [p.text for p in PromptSource(spec).take(40)]


def test_common_words_are_preferred_when_the_tokenizer_knows_them(tokenizer_path: TokPath) -> None:
    prompt = PromptSource(WorkloadSpec(input_len=parse("300"), tokenizer=str(tokenizer_path("bytelevel")))).next()
    assert set((prompt.text or "").split(" ")) <= set(COMMON_WORDS)


def test_chat_prompts_with_a_tokenizer_count_the_content_exactly(tokenizer_path: TokPath) -> None:
    path = tokenizer_path("metaspace")
    tok = Tokenizer.from_file(str(path))
    prompt = PromptSource(WorkloadSpec(input_len=parse("77"), tokenizer=str(path), api="chat")).next()
    assert prompt.text is None and prompt.messages is not None
    assert len(tok.encode(prompt.messages[0]["content"], add_special_tokens=False).ids) == 77
    assert prompt.exact is True
