"""Token-length distributions for prompts and answers.

A length is written the way a user types it on the command line and stored the same way in the run spec:

- ``"512"`` (or ``"fixed:512"``): always 512 tokens.
- ``"normal:512,64"``: normal with mean 512 and standard deviation 64, rounded to the nearest integer and
  clipped to ``[1, MAX_LENGTH]``.
- ``"uniform:256,768"``: every integer from 256 to 768 inclusive equally likely.

``str(dist)`` gives that text back, and ``parse(str(dist)) == dist``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

LengthKind = Literal["fixed", "normal", "uniform"]

# Longer than any model context today; a cap keeps a typo such as "5120000000" from eating all memory.
MAX_LENGTH = 10_000_000

_EXAMPLES = 'e.g. "512", "normal:512,64" (mean,stdev) or "uniform:256,768" (low,high)'


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts; every sample is an ``int`` in ``[1, MAX_LENGTH]``.

    Build one with :meth:`fixed`, :meth:`normal`, :meth:`uniform` or :func:`parse`. Only the fields of
    its ``kind`` are used: ``length`` (fixed), ``mu``/``sigma`` (normal), ``low``/``high`` (uniform).
    """

    kind: LengthKind = "fixed"
    length: int = 512
    mu: float = 0.0
    sigma: float = 0.0
    low: int = 0
    high: int = 0

    def __post_init__(self) -> None:
        # Zero the fields another kind uses, so equal distributions compare equal however they were built.
        if self.kind != "fixed":
            object.__setattr__(self, "length", 0)
        if self.kind != "normal":
            object.__setattr__(self, "mu", 0.0)
            object.__setattr__(self, "sigma", 0.0)
        if self.kind != "uniform":
            object.__setattr__(self, "low", 0)
            object.__setattr__(self, "high", 0)
        if self.kind == "fixed":
            _check_length("length", self.length)
        elif self.kind == "normal":
            for name in ("mu", "sigma"):
                value = getattr(self, name)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(f"normal {name} must be a number, got {value!r}; {_EXAMPLES}")
                object.__setattr__(self, name, float(value))
            if not math.isfinite(self.mu) or not 1 <= self.mu <= MAX_LENGTH:
                raise ValueError(
                    f"normal mean must be a finite number of tokens from 1 to {MAX_LENGTH}, "
                    f"got {self.mu!r}; {_EXAMPLES}"
                )
            if not math.isfinite(self.sigma) or not 0 <= self.sigma <= MAX_LENGTH:
                raise ValueError(
                    f"normal stdev must be a finite number from 0 (no spread) to {MAX_LENGTH}, "
                    f"got {self.sigma!r}; {_EXAMPLES}"
                )
        elif self.kind == "uniform":
            _check_length("uniform low", self.low)
            _check_length("uniform high", self.high)
            if self.low > self.high:
                raise ValueError(
                    f"uniform low ({self.low}) is greater than high ({self.high}); "
                    f'write the smaller bound first, e.g. "uniform:{self.high},{self.low}"'
                )
        else:
            raise ValueError(f"unknown length kind {self.kind!r}; expected fixed, normal or uniform")

    @classmethod
    def fixed(cls, length: int) -> LengthDist:
        return cls(kind="fixed", length=length)

    @classmethod
    def normal(cls, mean: float, stdev: float) -> LengthDist:
        return cls(kind="normal", mu=mean, sigma=stdev)

    @classmethod
    def uniform(cls, low: int, high: int) -> LengthDist:
        return cls(kind="uniform", low=low, high=high)

    def sample(self, rng: np.random.Generator) -> int:
        """Draw one length, always in ``[1, MAX_LENGTH]``.

        normal: the draw is rounded to the nearest integer (half to even) and clipped at 1 below and at
        ``MAX_LENGTH`` above, so the realised mean is :attr:`mean`, which exceeds ``mu`` when ``mu`` is
        within a few stdevs of 1. fixed draws nothing from ``rng``.
        """
        if self.kind == "fixed":
            return self.length
        if self.kind == "uniform":
            return int(rng.integers(self.low, self.high, endpoint=True))
        return min(MAX_LENGTH, max(1, int(np.rint(rng.normal(self.mu, self.sigma)))))

    @property
    def mean(self) -> float:
        """Expected value of :meth:`sample` (for normal: of the rounded and clipped draw)."""
        if self.kind == "fixed":
            return float(self.length)
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        return _clipped_rounded_normal_mean(self.mu, self.sigma)

    @property
    def minimum(self) -> int:
        """Smallest value :meth:`sample` can return."""
        if self.kind == "fixed":
            return self.length
        if self.kind == "uniform":
            return self.low
        return 1 if self.sigma > 0 else min(MAX_LENGTH, max(1, int(np.rint(self.mu))))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(self.length)
        if self.kind == "uniform":
            return f"uniform:{self.low},{self.high}"
        return f"normal:{_format_number(self.mu)},{_format_number(self.sigma)}"


def parse(text: str) -> LengthDist:
    """Read ``"512"``, ``"fixed:512"``, ``"normal:512,64"`` or ``"uniform:256,768"``.

    Raises ``ValueError`` naming what was wrong and showing a correct value.
    """
    if not isinstance(text, str):
        raise ValueError(f"a token length must be text such as {_EXAMPLES}; got {type(text).__name__}")
    raw = text.strip()
    if not raw:
        raise ValueError(f"empty token length; {_EXAMPLES}")
    kind, sep, rest = raw.partition(":")
    if not sep:
        kind, rest = "fixed", raw
    kind = kind.strip().lower()
    args = [a.strip() for a in rest.split(",")]
    if kind == "fixed":
        _expect_args(raw, kind, args, 1)
        return LengthDist.fixed(_parse_int(raw, "length", args[0]))
    if kind == "normal":
        _expect_args(raw, kind, args, 2)
        return LengthDist.normal(_parse_float(raw, "mean", args[0]), _parse_float(raw, "stdev", args[1]))
    if kind == "uniform":
        _expect_args(raw, kind, args, 2)
        return LengthDist.uniform(_parse_int(raw, "low", args[0]), _parse_int(raw, "high", args[1]))
    raise ValueError(f"unknown length kind {kind!r} in {raw!r}; {_EXAMPLES}")


def _check_length(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a whole number of tokens, got {value!r}; {_EXAMPLES}")
    if value < 1:
        raise ValueError(f"{what} must be at least 1 token, got {value}; {_EXAMPLES}")
    if value > MAX_LENGTH:
        raise ValueError(f"{what} must be at most {MAX_LENGTH} tokens, got {value}; {_EXAMPLES}")


def _expect_args(raw: str, kind: str, args: list[str], n: int) -> None:
    if len(args) != n:
        names = {"fixed": "one length", "normal": "mean,stdev", "uniform": "low,high"}[kind]
        raise ValueError(f"{kind} takes {names} ({n} value{'s' if n > 1 else ''}), got {raw!r}; {_EXAMPLES}")


def _parse_int(raw: str, what: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} in {raw!r} is not a number; {_EXAMPLES}") from None
    if math.isfinite(number) and number.is_integer():
        return int(number)
    raise ValueError(f"{what} {value!r} in {raw!r} must be a whole number of tokens; {_EXAMPLES}")


def _parse_float(raw: str, what: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} in {raw!r} is not a number; {_EXAMPLES}") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} {value!r} in {raw!r} must be a finite number; {_EXAMPLES}")
    return number


def _format_number(x: float) -> str:
    # repr keeps every digit, so parse(str(d)) == d exactly.
    return str(int(x)) if x.is_integer() else repr(x)


def _clipped_rounded_normal_mean(mu: float, sigma: float) -> float:
    """E[clip(round(X), 1, MAX_LENGTH)] for X ~ N(mu, sigma).

    E[Y] = 1 + sum_{k=1}^{M-1} P(X >= k + 1/2). Terms more than 10 sigma below the mean are 1 and
    those more than 10 sigma above are 0 to double precision, so only ~20 sigma terms are summed.
    Past sigma = 1000 that sum is replaced by the integral of the continuous clipped normal, whose
    difference from the sum is below 1e-4 tokens there.
    """
    if sigma == 0:
        return float(min(MAX_LENGTH, max(1, int(np.rint(mu)))))
    if sigma > 1000:
        a, b = 1.0, float(MAX_LENGTH)
        alpha, beta = (a - mu) / sigma, (b - mu) / sigma
        cdf_a, cdf_b = _norm_cdf(alpha), _norm_cdf(beta)
        inside = mu * (cdf_b - cdf_a) + sigma * (_norm_pdf(alpha) - _norm_pdf(beta))
        return a * cdf_a + inside + b * (1 - cdf_b)
    k_lo = max(1, math.floor(mu - 10 * sigma))
    k_hi = min(MAX_LENGTH - 1, math.ceil(mu + 10 * sigma))
    total = 1.0 + (k_lo - 1)
    for k in range(k_lo, k_hi + 1):
        total += 0.5 * math.erfc((k + 0.5 - mu) / (sigma * math.sqrt(2)))
    return total


def _norm_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _norm_pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
