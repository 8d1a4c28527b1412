"""What the planner is asked: request lengths (a mean for speed, an upper quantile for memory) and SLOs.

Lengths: speed figures use each distribution's mean (the average request); memory figures use an upper
quantile, so that the long requests of the mix still fit when the cache is full:
- fixed: the length itself;
- normal(mu, sigma): the P99, mu + 2.3263479 sigma, rounded *up* to a whole token (at least 1);
- uniform(low, high): its maximum, high (P100: every draw fits).
Prompt and output quantiles are taken separately and added, which is conservative (the P99 of a sum is
below the sum of the P99s).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from llm_knee.workload.lengths import LengthDist, parse

P99_Z = 2.3263478740408408  # standard normal quantile at 0.99
DEFAULT_TOK_S_PER_USER = 30.0  # domain.md §4: per-user decode speed below ~30 tok/s feels slow
DEFAULT_TOK_S_SOURCE = "default: domain.md §4, per-user decode below ~30 tok/s feels slow"
DEFAULT_EFFICIENCY = 0.6  # domain.md §5: 0.5-0.8 in practice
STRICT_P99_EFFICIENCY = 0.45  # domain.md §5: 0.4-0.5 under a strict P99 target


class PlanInputError(ValueError):
    """A planner input that can never work; the message says what to give instead."""


def memory_quantile(dist: LengthDist) -> int:
    """The length memory is sized for (see the module docstring)."""
    if dist.kind == "fixed":
        return dist.length
    if dist.kind == "uniform":
        return dist.high
    return max(1, math.ceil(dist.mu + P99_Z * dist.sigma))


def quantile_rule(dist: LengthDist) -> str:
    if dist.kind == "fixed":
        return "fixed length"
    if dist.kind == "uniform":
        return f"maximum of {dist} (P100)"
    return f"P99 of {dist}: ceil({dist.mu:g} + {P99_Z:.7f} x {dist.sigma:g})"


@dataclass(frozen=True)
class Lengths:
    input: LengthDist
    output: LengthDist

    @classmethod
    def parse(cls, input_len: str, output_len: str) -> Lengths:
        try:
            return cls(parse(input_len), parse(output_len))
        except ValueError as exc:
            raise PlanInputError(f"bad length: {exc}") from None

    @property
    def input_mean(self) -> float:
        return self.input.mean

    @property
    def output_mean(self) -> float:
        return self.output.mean

    @property
    def input_memory(self) -> int:
        return memory_quantile(self.input)

    @property
    def output_memory(self) -> int:
        return memory_quantile(self.output)

    @property
    def request_tokens_memory(self) -> int:
        return self.input_memory + self.output_memory

    def describe(self) -> str:
        return (
            f"speed uses the means (input {self.input_mean:g}, output {self.output_mean:g} tokens); memory uses "
            f"input {self.input_memory} ({quantile_rule(self.input)}) + output {self.output_memory} "
            f"({quantile_rule(self.output)})"
        )


@dataclass(frozen=True)
class PlanSlo:
    """Targets the predicted knee must meet. The planner predicts one value per figure (no spread), so a
    percentile in a term only matters for the fleet efficiency (a P99 term is a strict target) and for
    the simulator, which measures real percentiles."""

    tok_s_per_user: float = DEFAULT_TOK_S_PER_USER
    tok_s_source: str = DEFAULT_TOK_S_SOURCE
    ttft_s: float | None = None
    ttft_percentile: float = 50.0
    e2e_s: float | None = None
    e2e_percentile: float = 50.0
    tpot_percentile: float | None = None  # set when the speed target came from a tpot term
    text: str = ""

    @property
    def strict_p99(self) -> bool:
        """Any time objective at P99 or above (domain.md §5 lowers the fleet efficiency for those)."""
        given = [
            self.ttft_percentile if self.ttft_s is not None else None,
            self.e2e_percentile if self.e2e_s is not None else None,
            self.tpot_percentile,
        ]
        return any(p is not None and p >= 99.0 for p in given)


_TIME_TERM = re.compile(
    r"^(?P<metric>ttft|tpot|e2e)(?:_p(?P<pct>\d{1,2}(?:\.\d+)?))?=(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s|us)?$"
)
_SPEED_TERM = re.compile(r"^(?:tok_s_per_user|tok_s|tokens_per_s_per_user)=(?P<num>\d+(?:\.\d+)?)$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "us": 1e-6}
_SLO_HELP = "e.g. --slo ttft=500ms,tok_s_per_user=30 (terms: ttft[_pNN]=T, tpot[_pNN]=T, e2e[_pNN]=T, tok_s_per_user=N)"


def parse_plan_slo(text: str | None) -> PlanSlo:
    """Read ``ttft=500ms,tok_s_per_user=30`` (also ``ttft_p99=500ms``, ``tpot_p50=40ms``, ``e2e=20s``).

    A tpot limit is the same target as a per-user speed of 1 / tpot; when both are given the stricter wins.
    """
    if text is None or not text.strip():
        return PlanSlo()
    speed: float | None = None
    speed_pct: float | None = None
    ttft: tuple[float, float] | None = None
    e2e: tuple[float, float] | None = None
    for raw in text.split(","):
        term = raw.strip().lower().replace(" ", "")
        if not term:
            continue
        m = _SPEED_TERM.match(term)
        if m is not None:
            value = float(m["num"])
            if value <= 0:
                raise PlanInputError(f"SLO tok_s_per_user must be > 0, got {raw.strip()!r}")
            speed = value if speed is None else max(speed, value)
            continue
        t = _TIME_TERM.match(term)
        if t is None:
            raise PlanInputError(f"cannot read SLO term {raw.strip()!r}; {_SLO_HELP}")
        pct = float(t["pct"]) if t["pct"] else 50.0
        if not 0 < pct < 100:
            raise PlanInputError(f"SLO percentile must be between 0 and 100, got {raw.strip()!r}")
        seconds = float(t["num"]) * _UNIT_S[t["unit"] or "ms"]
        if seconds <= 0:
            raise PlanInputError(f"SLO limit must be > 0, got {raw.strip()!r}")
        if t["metric"] == "ttft":
            ttft = (seconds, pct)
        elif t["metric"] == "e2e":
            e2e = (seconds, pct)
        else:
            as_speed = 1.0 / seconds
            speed = as_speed if speed is None else max(speed, as_speed)
            speed_pct = pct
    if speed is None and ttft is None and e2e is None:
        raise PlanInputError(f"empty SLO; {_SLO_HELP}")
    return PlanSlo(
        tok_s_per_user=DEFAULT_TOK_S_PER_USER if speed is None else speed,
        tok_s_source=DEFAULT_TOK_S_SOURCE if speed is None else f"--slo {text.strip()}",
        ttft_s=None if ttft is None else ttft[0],
        ttft_percentile=50.0 if ttft is None else ttft[1],
        e2e_s=None if e2e is None else e2e[0],
        e2e_percentile=50.0 if e2e is None else e2e[1],
        tpot_percentile=speed_pct,
        text=text.strip(),
    )


def fleet_efficiency(efficiency: float | None, slo: PlanSlo) -> tuple[float, str]:
    """The efficiency for fleet sizing and where it comes from; PlanInputError outside (0, 1]."""
    if efficiency is not None:
        if not (0.0 < efficiency <= 1.0) or math.isnan(efficiency):
            raise PlanInputError(f"--efficiency must be in (0, 1], got {efficiency:g}")
        return efficiency, "--efficiency"
    if slo.strict_p99:
        return STRICT_P99_EFFICIENCY, "a P99 SLO is set (domain.md §5: 0.4-0.5 under a strict P99 target)"
    return DEFAULT_EFFICIENCY, "default (domain.md §5: 0.5-0.8; 0.45 when a P99 SLO is set)"
