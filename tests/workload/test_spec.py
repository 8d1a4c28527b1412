"""WorkloadSpec: defaults, validation and the JSON form stored in the run spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_knee.workload.lengths import LengthDist, parse
from llm_knee.workload.spec import WorkloadSpec


def test_defaults_are_fixed_512_in_256_out_completions_unique_prompts() -> None:
    spec = WorkloadSpec()
    assert spec.input_len == LengthDist.fixed(512)
    assert spec.output_len == LengthDist.fixed(256)
    assert spec.api == "completions"
    assert (spec.prompt_file, spec.tokenizer, spec.shared_prefix_tokens, spec.seed) == (None, None, 0, 0)


def test_dict_form_is_json_safe_and_round_trips() -> None:
    spec = WorkloadSpec(
        input_len=parse("normal:512.5,64"),
        output_len=parse("uniform:16,300"),
        api="chat",
        tokenizer="/models/llama/tokenizer.json",
        shared_prefix_tokens=128,
        seed=7,
    )
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["input_len"] == "normal:512.5,64"
    assert WorkloadSpec.from_dict(data) == spec
    with_file = WorkloadSpec(prompt_file=Path("prompts.jsonl"))
    assert WorkloadSpec.from_dict(json.loads(json.dumps(with_file.to_dict()))) == with_file


def test_from_dict_fills_missing_keys_with_defaults() -> None:
    assert WorkloadSpec.from_dict({}) == WorkloadSpec()
    assert WorkloadSpec.from_dict({"seed": 3}).seed == 3


def test_paths_given_as_text_are_accepted() -> None:
    spec = WorkloadSpec(prompt_file="p.jsonl", tokenizer=Path("tok"))  # type: ignore[arg-type]
    assert spec.prompt_file == Path("p.jsonl")
    assert spec.tokenizer == "tok"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"input_len": "0"}, "workload input_len: length must be at least 1 token"),
        ({"output_len": 256}, 'output_len must be text such as "512"'),
        ({"api": "embeddings"}, "api must be one of completions, chat"),
        ({"api": None}, "api must be one of"),
        ({"seed": "1"}, "seed must be a whole number"),
        ({"seed": -1}, "seed must be 0 or more"),
        ({"shared_prefix_tokens": True}, "shared_prefix_tokens must be a whole number"),
        ({"tokenizer": 5}, "tokenizer must be text or null"),
        ({"color": "red"}, "unknown workload field(s) 'color'"),
    ],
)
def test_from_dict_rejects_bad_values_with_the_field_named(data: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError) as info:
        WorkloadSpec.from_dict(data)
    assert says in str(info.value)


def test_from_dict_rejects_a_non_object() -> None:
    with pytest.raises(ValueError, match="must be a JSON object"):
        WorkloadSpec.from_dict([1, 2])  # type: ignore[arg-type]


def test_lengths_must_be_length_dists() -> None:
    with pytest.raises(ValueError, match="input_len must be a LengthDist"):
        WorkloadSpec(input_len="512")  # type: ignore[arg-type]


def test_shared_prefix_must_leave_room_for_a_part_of_each_prompt_of_its_own() -> None:
    with pytest.raises(ValueError, match=r"smaller than the shortest input length \(512\)"):
        WorkloadSpec(shared_prefix_tokens=512)
    with pytest.raises(ValueError, match=r"shortest input length \(uniform:100,900\)"):
        WorkloadSpec(input_len=parse("uniform:100,900"), shared_prefix_tokens=100)
    with pytest.raises(ValueError, match=r"mean input length \(normal:300,50\)"):
        WorkloadSpec(input_len=parse("normal:300,50"), shared_prefix_tokens=300)
    assert WorkloadSpec(input_len=parse("normal:300,50"), shared_prefix_tokens=299).shared_prefix_tokens == 299
    assert WorkloadSpec(shared_prefix_tokens=511).shared_prefix_tokens == 511


def test_shared_prefix_and_prompt_file_do_not_mix() -> None:
    with pytest.raises(ValueError, match="shared_prefix_tokens applies to generated prompts only"):
        WorkloadSpec(prompt_file=Path("p.jsonl"), shared_prefix_tokens=10)
