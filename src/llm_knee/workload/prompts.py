"""Prompts to send: generated to a token length, or read from a JSONL prompt file.

Generated prompts are random words. Each starts with a *head* of a few words spelled from the prompt's
sequence number, so no two prompts share even their first tokens (a server's prefix cache would
otherwise serve repeated openings from memory and make TTFT look too good). With
``shared_prefix_tokens = k`` every prompt instead starts with the same k tokens, and the head follows.
The head has ``m`` words, the smallest number for which ``W**m >= 2**32`` (W, the head alphabet, is 432
built-in words, so m = 4): the first m tokens after the prefix are distinct for the first 2**32 prompts,
and the very first one is distinct within every W consecutive prompts. Prompts shorter than m tokens
after the prefix keep only part of the head and may repeat.

**With a tokenizer** (``spec.tokenizer``) the text is built from whole-word tokens of that tokenizer
(the common words below when it has them, else its own vocabulary), encoded without special tokens,
and corrected until the count is exactly the one asked for; ``exact`` is True. Studying the vocabulary
takes 0.2-1.5 s once per source; after that each prompt costs one encode of its text, a few
microseconds per token in the tokenizers library: on a busy 2-core machine ~400-750 prompts/s of 512
tokens and ~35-75 of 4096 tokens with :meth:`PromptSource.next`, about twice that with
:meth:`PromptSource.take`, which encodes a batch on all cores. Long prompts are therefore best made
ahead of a level (``take``), not one by one in a latency-measuring event loop.

**Without a tokenizer** the text is ``n`` words from :mod:`llm_knee.workload.words`, each a single
token after a space in the GPT-2/3.5/4/4o, Llama 2/3, Mistral, Qwen2/2.5/3, Phi-3, Gemma, DeepSeek,
Falcon and Command-R vocabularies, and the first one a single token at the start of a text too, so
``prompt_tokens = n`` is exact for those families (checked against GPT-2, cl100k, o200k, Llama 2, Llama 3
and Qwen2 tokenizers: no deviation over 400 prompts of 1-4096 tokens) before the special tokens (BOS,
+1) and chat template (+5 to +30) that the server adds. Other vocabularies split some words: expect a
few percent more tokens. ``exact`` is False; reports use the server's ``usage.prompt_tokens`` when it
reports one.

**Chat api**: the text becomes ``messages=[{"role": "user", "content": text}]`` and ``text`` is None;
the server's chat template adds tokens that ``prompt_tokens`` does not count. For the completions api
``text`` is set and ``messages`` is None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llm_knee.workload.errors import TokenizerError, WorkloadError
from llm_knee.workload.promptfile import FilePrompt, load_prompt_file
from llm_knee.workload.spec import WorkloadSpec
from llm_knee.workload.tokenizer import FitJob, WordVocab, load_tokenizer
from llm_knee.workload.words import COMMON_WORDS, START_WORDS

# Head length is chosen so that heads stay unique for this many prompts.
_UNIQUE_PROMPTS = 2**32


@dataclass(slots=True)
class Prompt:
    """One request's input: exactly one of ``text`` (completions) or ``messages`` (chat) is set."""

    text: str | None
    messages: list[dict[str, str]] | None
    prompt_tokens: int  # our count: exact when ``exact``, else the approximation described above
    output_tokens: int  # tokens to ask the server for
    exact: bool  # True when counted by a real tokenizer


class PromptSource:
    """Deterministic stream of prompts for one :class:`WorkloadSpec`; not thread-safe.

    ``worker``/``workers`` split one workload over several load workers: worker ``w`` of ``W`` produces
    the prompts numbered ``w, w + W, w + 2W, ...`` of the same global sequence (file lines likewise), so
    heads stay unique across workers and the shared prefix is the same for all. Construction validates
    everything (tokenizer, prompt file) and raises a :class:`WorkloadError` subclass with a clear
    message; :meth:`next` does not fail on user input after that.
    """

    def __init__(self, spec: WorkloadSpec, *, worker: int = 0, workers: int = 1) -> None:
        if workers < 1 or not 0 <= worker < workers:
            raise WorkloadError(f"worker must be in [0, workers) with workers >= 1, got {worker} of {workers}")
        self.spec = spec
        self._worker, self._workers = worker, workers
        self.exact: bool = spec.tokenizer is not None
        self._count = 0
        # Separate streams, so that changing e.g. the output length does not change the prompts.
        streams = np.random.SeedSequence([spec.seed, worker]).spawn(3)
        self._rng_in, self._rng_out, self._rng_words = (np.random.default_rng(s) for s in streams)
        shared_rng = np.random.default_rng(np.random.SeedSequence([spec.seed, 2**31]))

        tokenizer = load_tokenizer(spec.tokenizer) if spec.tokenizer is not None else None
        self._file: list[FilePrompt] | None = None
        self._vocab: WordVocab | None = None
        if spec.prompt_file is not None:
            self._file = load_prompt_file(spec.prompt_file, api=spec.api, tokenizer=tokenizer)
            return
        if tokenizer is not None:
            self._vocab = WordVocab(tokenizer, preferred=COMMON_WORDS)
            head_words, self._filler = self._vocab.start_words, np.array(self._vocab.words, dtype=object)
        else:
            head_words, self._filler = START_WORDS, np.array(COMMON_WORDS, dtype=object)
        self._head_words = head_words
        base = len(head_words)
        self._head_len = max(1, math.ceil(math.log(_UNIQUE_PROMPTS) / math.log(base)))
        self._modulus = base**self._head_len
        # Any multiplier coprime with the base permutes [0, modulus); near the golden ratio it spreads
        # consecutive prompt numbers far apart.
        mult = int(self._modulus * 0.6180339887) | 1
        while math.gcd(mult, base) != 1:
            mult += 2
        self._mult = mult
        self._offset = int(shared_rng.integers(0, self._modulus))
        self._prefix_words: list[str] = []
        self._prefix_ids: list[int] = []
        k = spec.shared_prefix_tokens
        if k > 0:
            first = head_words[int(shared_rng.integers(0, base))]
            words = [first, *self._filler[shared_rng.integers(0, len(self._filler), size=k - 1)].tolist()]
            if self._vocab is not None:
                text, self._prefix_ids = self._vocab.fit(FitJob(words, k, seed=(spec.seed, 0)))
                words = text.split(" ")
                self._check_prefix_kept(self._vocab, text, shared_rng)
            self._prefix_words = words

    def __iter__(self) -> PromptSource:
        return self

    def __next__(self) -> Prompt:
        return self.next()

    def next(self) -> Prompt:
        """The next prompt of this worker's share of the sequence."""
        return self.take(1)[0]

    def take(self, count: int) -> list[Prompt]:
        """The next ``count`` prompts; the same as ``count`` calls of :meth:`next`, but with a tokenizer
        their texts are encoded in one batch on all cores, which is several times faster."""
        if count < 0:
            raise ValueError(f"cannot take {count} prompts")
        numbers = [(self._count + i) * self._workers + self._worker for i in range(count)]
        self._count += count
        if self._file is not None:
            return [self._from_file(self._file[number % len(self._file)]) for number in numbers]
        plans = [self._plan(number) for number in numbers]
        if self._vocab is None:
            return [self._prompt(" ".join(job.words), job.n, out, exact=False) for job, out in plans]
        k = self.spec.shared_prefix_tokens
        prompts = []
        for (job, out), (text, ids) in zip(plans, self._vocab.fit_many([job for job, _ in plans]), strict=True):
            if k > 0 and ids[:k] != self._prefix_ids:
                raise self._prefix_error()
            prompts.append(self._prompt(text, job.n, out, exact=True))
        return prompts

    def _plan(self, number: int) -> tuple[FitJob, int]:
        """Words for prompt ``number`` (a first try at its length) and its output token count."""
        k = self.spec.shared_prefix_tokens
        n = self.spec.input_len.sample(self._rng_in)
        if k > 0:
            n = max(n, k + 1)
        output_tokens = self.spec.output_len.sample(self._rng_out)
        body = n - k
        head = self._head(number)[:body]
        filler = self._filler[self._rng_words.integers(0, len(self._filler), size=body - len(head))].tolist()
        words = [*self._prefix_words, *head, *filler]
        job = FitJob(words, n, keep=len(self._prefix_words) + len(head), seed=(self.spec.seed, 1, number))
        return job, output_tokens

    def _check_prefix_kept(self, vocab: WordVocab, prefix: str, rng: np.random.Generator) -> None:
        """Fail at build time, not mid-run, when text after the prefix changes the prefix's tokens."""
        k = self.spec.shared_prefix_tokens
        for _ in range(8):
            follow = " ".join(self._filler[rng.integers(0, len(self._filler), size=16)].tolist())
            ids = vocab.tokenizer.encode(f"{prefix} {follow}", add_special_tokens=False).ids
            if ids[:k] != self._prefix_ids:
                raise self._prefix_error()

    def _prefix_error(self) -> TokenizerError:
        return TokenizerError(
            f"with this tokenizer a shared prefix of {self.spec.shared_prefix_tokens} tokens does not keep "
            "its tokens when text follows it (its merges cross spaces); use shared_prefix_tokens=0 or "
            "another tokenizer"
        )

    def _head(self, number: int) -> list[str]:
        """``head_len`` words spelling ``number`` after a fixed permutation, least significant first."""
        value = (number * self._mult + self._offset) % self._modulus
        base = len(self._head_words)
        words = []
        for _ in range(self._head_len):
            value, digit = divmod(value, base)
            words.append(self._head_words[digit])
        return words

    def _prompt(self, text: str, tokens: int, output_tokens: int, *, exact: bool) -> Prompt:
        if self.spec.api == "chat":
            return Prompt(None, [{"role": "user", "content": text}], tokens, output_tokens, exact)
        return Prompt(text, None, tokens, output_tokens, exact)

    def _from_file(self, line: FilePrompt) -> Prompt:
        output_tokens = line.output_tokens
        if output_tokens is None:
            output_tokens = self.spec.output_len.sample(self._rng_out)
        if line.text is not None:
            return self._prompt(line.text, line.prompt_tokens, output_tokens, exact=self.exact)
        messages = [dict(m) for m in line.messages or ()]
        return Prompt(None, messages, line.prompt_tokens, output_tokens, self.exact)
