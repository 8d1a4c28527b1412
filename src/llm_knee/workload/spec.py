"""WorkloadSpec: everything that decides which prompts a run sends, saved in the run's spec file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from llm_knee.workload.lengths import LengthDist, parse

Api = Literal["completions", "chat"]
APIS: tuple[str, ...] = get_args(Api)


@dataclass(frozen=True)
class WorkloadSpec:
    """What to send.

    - ``input_len`` / ``output_len``: prompt and answer lengths in tokens. ``input_len`` is unused with a
      ``prompt_file``; ``output_len`` applies to file lines that carry no ``output_tokens``.
    - ``api``: ``completions`` (``/v1/completions``, a text prompt) or ``chat`` (``/v1/chat/completions``,
      a message list).
    - ``prompt_file``: a JSONL file of prompts (see :mod:`llm_knee.workload.prompts`).
    - ``tokenizer``: a local ``tokenizer.json`` or a Hugging Face tokenizer directory holding one. With
      it prompt lengths are exact; without it they are approximate. Never downloaded.
    - ``shared_prefix_tokens``: every generated prompt starts with the same prefix of this many tokens
      (prefix-cache experiments); 0 makes every prompt unique from its first token. It must be below the
      smallest input length (for ``normal``: below the mean; rarer draws that are not longer than the
      prefix are raised to ``shared_prefix_tokens + 1`` so that every prompt has a part of its own).
    - ``seed``: the same seed gives the same prompts and lengths, in the same order.
    """

    input_len: LengthDist = field(default_factory=lambda: LengthDist.fixed(512))
    output_len: LengthDist = field(default_factory=lambda: LengthDist.fixed(256))
    api: Api = "completions"
    prompt_file: Path | None = None
    tokenizer: str | None = None
    shared_prefix_tokens: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len"):
            if not isinstance(getattr(self, name), LengthDist):
                raise ValueError(f"{name} must be a LengthDist (use lengths.parse('512')), got {getattr(self, name)!r}")
        if self.api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        if self.prompt_file is not None and not isinstance(self.prompt_file, Path):
            if not isinstance(self.prompt_file, str):
                raise ValueError(f"prompt_file must be a path, got {self.prompt_file!r}")
            object.__setattr__(self, "prompt_file", Path(self.prompt_file))
        if self.tokenizer is not None and not isinstance(self.tokenizer, str):
            if not isinstance(self.tokenizer, Path):
                raise ValueError(f"tokenizer must be a path, got {self.tokenizer!r}")
            object.__setattr__(self, "tokenizer", str(self.tokenizer))
        _check_int("seed", self.seed)
        _check_int("shared_prefix_tokens", self.shared_prefix_tokens)
        prefix = self.shared_prefix_tokens
        if prefix > 0 and self.prompt_file is not None:
            raise ValueError(
                "shared_prefix_tokens applies to generated prompts only; a prompt file brings its own text. "
                "Put the common prefix into the file's prompts, or drop the prompt file."
            )
        limit = self.input_len.mu if self.input_len.kind == "normal" else self.input_len.minimum
        if prefix > 0 and prefix >= limit:
            what = "mean" if self.input_len.kind == "normal" else "shortest"
            raise ValueError(
                f"shared_prefix_tokens ({prefix}) must be smaller than the {what} input length "
                f"({self.input_len}), so that each prompt still has tokens of its own after the prefix"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form; lengths are written as their parseable text."""
        return {
            "input_len": str(self.input_len),
            "output_len": str(self.output_len),
            "api": self.api,
            "prompt_file": None if self.prompt_file is None else str(self.prompt_file),
            "tokenizer": self.tokenizer,
            "shared_prefix_tokens": self.shared_prefix_tokens,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkloadSpec:
        """Inverse of :meth:`to_dict`. Missing keys take their defaults; unknown keys are an error."""
        if not isinstance(data, dict):
            raise ValueError(f"a workload spec must be a JSON object, got {type(data).__name__}")
        known = {"input_len", "output_len", "api", "prompt_file", "tokenizer", "shared_prefix_tokens", "seed"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown workload field(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(known))}"
            )
        kwargs: dict[str, Any] = {}
        for name in ("input_len", "output_len"):
            if name in data:
                if not isinstance(data[name], str):
                    raise ValueError(f'workload {name} must be text such as "512", got {data[name]!r}')
                try:
                    kwargs[name] = parse(data[name])
                except ValueError as exc:
                    raise ValueError(f"workload {name}: {exc}") from None
        for name in ("api", "prompt_file", "tokenizer"):
            if name in data:
                value = data[name]
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"workload {name} must be text or null, got {value!r}")
                if name == "api" and value is None:
                    raise ValueError(f"workload api must be one of {', '.join(APIS)}, got null")
                kwargs[name] = Path(value) if name == "prompt_file" and value is not None else value
        for name in ("shared_prefix_tokens", "seed"):
            if name in data:
                kwargs[name] = data[name]
        return cls(**kwargs)


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, got {value}")
