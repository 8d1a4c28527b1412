"""Local tokenizers and texts of an exact token count.

:func:`load_tokenizer` reads a ``tokenizer.json`` (or a Hugging Face tokenizer directory holding one)
from disk; nothing is ever downloaded. :class:`WordVocab` studies a tokenizer once — which whole words
are exactly one token between spaces, and which are one token at the start of a text — so that a text
of N such words joined by spaces is, for the usual whitespace-splitting pre-tokenizers, N tokens on the
first try. :meth:`WordVocab.fit` then checks the count by encoding and corrects any drift in a bounded
number of rounds, so the result is exact for any tokenizer or a :class:`TokenizerError` says why not.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from llm_knee.workload.errors import TokenizerError

# Enough words for random text to look varied; studying more would only slow the start-up.
_MAX_CANDIDATES = 50_000
_MAX_WORD_LEN = 16
_MIN_PREFERRED = 64
# Word-level correction rounds, then token-level rounds, before giving up on an exact count.
_WORD_ROUNDS = 8
_TOKEN_ROUNDS = 4


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a local ``tokenizer.json``, or the one inside a Hugging Face tokenizer directory."""
    given = Path(path).expanduser()
    hint = "give a local tokenizer.json or a Hugging Face tokenizer directory containing one (nothing is downloaded)"
    if not given.exists():
        raise TokenizerError(f"tokenizer {str(path)!r}: no such file or directory; {hint}")
    file = given / "tokenizer.json" if given.is_dir() else given
    if given.is_dir() and not file.is_file():
        found = sorted(p.name for p in given.iterdir() if p.name.startswith("tokenizer") or p.suffix == ".model")
        extra = (
            f" (found {', '.join(found)}; only the fast-tokenizer tokenizer.json format is read — " if found else " ("
        )
        raise TokenizerError(
            f"tokenizer directory {str(given)!r} has no tokenizer.json{extra}"
            "save one with transformers' AutoTokenizer.from_pretrained(...).save_pretrained(DIR))"
        )
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the tokenizers library raises bare Exception for unreadable files
        raise TokenizerError(f"cannot read tokenizer {str(file)!r}: {exc}; {hint}") from None


@dataclass(frozen=True, slots=True)
class FitJob:
    """A text to make exactly ``n`` tokens long, starting from ``words``.

    ``keep``: leading words never dropped while correcting. ``seed``: entropy for any words added.
    """

    words: list[str]
    n: int
    keep: int = 0
    seed: tuple[int, ...] = (0,)


class WordVocab:
    """The whole-word tokens of one tokenizer, and texts of exactly N tokens built from them.

    ``words`` are single tokens between spaces; ``start_words`` (a subset) are single tokens at the
    start of a text as well. They are taken from ``preferred`` when at least 64 of those qualify (plain
    common words keep prompts readable and inoffensive, and a small set keeps the tokenizer's word cache
    warm, which makes encoding several times faster); otherwise from the tokenizer's own vocabulary.
    Build once per tokenizer: studying the vocabulary encodes a probe of up to 50,000 words.
    """

    def __init__(self, tokenizer: Tokenizer, preferred: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        words = self._single_in_context(tokenizer, list(dict.fromkeys(preferred)))
        if len(words) < _MIN_PREFERRED:
            candidates = self._candidates(tokenizer)
            words = self._single_in_context(tokenizer, candidates)
            if len(words) < 2:
                # No word stays one token between spaces (e.g. merges that cross spaces): build from
                # the vocabulary's words anyway and let the correction rounds find the count.
                words = candidates
        self.words: tuple[str, ...] = tuple(words)
        if len(self.words) < 2:
            raise TokenizerError(
                f"the tokenizer has {len(self.words)} tokens that decode to a word of plain ASCII letters "
                "(at least 2 are needed to build prompts); use a text tokenizer with a word vocabulary, "
                "or give a prompt file"
            )
        alone = tokenizer.encode_batch(list(self.words), add_special_tokens=False)
        start = tuple(w for w, enc in zip(self.words, alone, strict=True) if len(enc.ids) == 1)
        self.start_words: tuple[str, ...] = start if len(start) >= 2 else self.words
        self._words_array = np.array(self.words, dtype=object)

    def count(self, text: str) -> int:
        """Tokens in ``text`` without special tokens."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def random_words(self, rng: np.random.Generator, n: int) -> list[str]:
        picks: list[str] = self._words_array[rng.integers(0, len(self.words), size=n)].tolist()
        return picks

    def fit(self, job: FitJob) -> tuple[str, list[int]]:
        """``(text, ids)`` for one job; see :meth:`fit_many`."""
        return self.fit_many([job])[0]

    def fit_many(self, jobs: Sequence[FitJob]) -> list[tuple[str, list[int]]]:
        """For each job, ``(text, ids)`` with ``len(ids) == job.n``: its words joined by spaces, made exact.

        All texts are encoded in one parallel batch. A text that misses its count is corrected alone:
        random words are added or words dropped at the end (never the first ``job.keep``); if that does
        not converge (tokenizers that merge across spaces), the text is cut at token ``n`` and decoded
        again. The random words come from ``job.seed`` only, so a job's result does not depend on the
        batch it was in. Raises :class:`TokenizerError` when no round gives the count.
        """
        for job in jobs:
            if job.n < 1:
                raise TokenizerError(f"cannot build a text of {job.n} tokens; the length must be at least 1")
        texts = [" ".join(job.words) for job in jobs]
        if len(texts) == 1:
            first = [self.tokenizer.encode(texts[0], add_special_tokens=False).ids]
        else:
            first = [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]
        out: list[tuple[str, list[int]]] = []
        for job, text, ids in zip(jobs, texts, first, strict=True):
            out.append((text, ids) if len(ids) == job.n else self._correct(job, ids))
        return out

    def _correct(self, job: FitJob, ids: list[int]) -> tuple[str, list[int]]:
        n = job.n
        rng = np.random.default_rng(np.random.SeedSequence(job.seed))
        words = list(job.words)
        for _ in range(_WORD_ROUNDS):
            if len(ids) == n:
                return " ".join(words), ids
            if len(ids) < n:
                words.extend(self.random_words(rng, n - len(ids)))
            else:
                drop = len(ids) - n
                if len(words) - drop < max(1, job.keep):
                    break
                del words[len(words) - drop :]
            ids = self._encode(" ".join(words))
        text = " ".join(words)
        for _ in range(_TOKEN_ROUNDS):
            if len(ids) == n:
                return text, ids
            if len(ids) > n:
                text = self.tokenizer.decode(ids[:n], skip_special_tokens=False)
            else:
                text = text + " " + " ".join(self.random_words(rng, n - len(ids)))
            ids = self._encode(text)
        if len(ids) == n:
            return text, ids
        raise TokenizerError(
            f"could not build a text of exactly {n} tokens with this tokenizer (last try gave {len(ids)}); "
            "its words do not encode independently of their neighbours. Use a prompt file, or run without "
            "--tokenizer to get approximate lengths"
        )

    def _encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    @staticmethod
    def _candidates(tokenizer: Tokenizer) -> list[str]:
        size = tokenizer.get_vocab_size(with_added_tokens=False)
        decoded = tokenizer.decode_batch([[i] for i in range(size)], skip_special_tokens=True)
        seen: set[str] = set()
        out: list[str] = []
        for text in decoded:
            word = text.strip()
            if 1 <= len(word) <= _MAX_WORD_LEN and word.isascii() and word.isalpha() and word not in seen:
                seen.add(word)
                out.append(word)
                if len(out) >= _MAX_CANDIDATES:
                    break
        return out

    @staticmethod
    def _single_in_context(tokenizer: Tokenizer, candidates: list[str]) -> list[str]:
        """Candidates that encode to exactly one token, decoding back to themselves, between spaces.

        One probe text of all candidates is encoded; each token is charged to the word whose span
        (leading space included) holds the token's last character.
        """
        if not candidates:
            return []
        # A sentinel word first so that every candidate is seen after a space, as in a real prompt.
        probe_words = [candidates[0], *candidates]
        ends: list[int] = []
        pos = -1
        for word in probe_words:
            pos += 1 + len(word)
            ends.append(pos)  # exclusive end of the word; its span starts at the space before it
        enc = tokenizer.encode(" ".join(probe_words), add_special_tokens=False)
        counts = [0] * len(probe_words)
        token_of = [-1] * len(probe_words)
        for token_id, (start, end) in zip(enc.ids, enc.offsets, strict=True):
            last = max(start, end - 1)
            index = min(bisect.bisect_right(ends, last), len(probe_words) - 1)
            counts[index] += 1
            token_of[index] = token_id
        singles = [i for i in range(1, len(probe_words)) if counts[i] == 1]
        decoded = tokenizer.decode_batch([[token_of[i]] for i in singles], skip_special_tokens=False)
        return [probe_words[i] for i, text in zip(singles, decoded, strict=True) if text.strip() == probe_words[i]]
