"""Prompts are made off the event loop, in order, and a failing source is not silenced."""

from __future__ import annotations

import pytest

from llm_knee.load.prefetch import PrefetchedPrompts
from llm_knee.workload.lengths import parse
from llm_knee.workload.prompts import Prompt, PromptSource
from llm_knee.workload.spec import WorkloadSpec


def spec() -> WorkloadSpec:
    return WorkloadSpec(input_len=parse("8"), output_len=parse("4"), seed=5)


def test_prefetched_prompts_are_the_sources_prompts_in_order() -> None:
    direct = PromptSource(spec()).take(300)
    feed = PrefetchedPrompts(PromptSource(spec()), depth=16).start()
    try:
        got = [feed.next() for _ in range(300)]
    finally:
        feed.close()
    assert [p.text for p in got] == [p.text for p in direct]


class Failing:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> Prompt:
        self.n += 1
        if self.n > 3:
            raise RuntimeError("prompt file vanished")
        return Prompt("x", None, 1, 1, False)


def test_a_source_error_reaches_the_caller() -> None:
    feed = PrefetchedPrompts(Failing(), depth=2).start()
    with pytest.raises(RuntimeError, match="vanished"):
        for _ in range(10):
            feed.next()
    feed.close()
