"""Faults serve-sim can inject, so a client's error handling and classification can be tested.

Per request, one fault class is drawn with the configured probabilities (at most one per request):

- ``http_5xx``   answered at once with ``http_5xx_status`` (503) and an OpenAI-style error body;
- ``http_4xx``   answered at once with ``http_4xx_status`` (429);
- ``reset``      the connection is reset (TCP RST) half-way through the output;
- ``malformed``  an undecodable SSE event (broken JSON) half-way through; the stream then goes on;
                 without streaming, the whole body is truncated JSON;
- ``disconnect`` the server closes the connection cleanly (FIN) half-way through, with no [DONE].

Plus engine-wide faults: a stall of ``stall_ms`` every ``stall_every_s`` (the engine and every stream
freeze, like a long GC pause or a CUDA-graph recapture), and ``oom_crash`` (the process exits with a
simulated CUDA out-of-memory error the first time KV blocks run out, instead of preempting).
"""

from __future__ import annotations

import json
import math
import random
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

FAULT_CLASSES: tuple[str, ...] = ("http_5xx", "http_4xx", "reset", "malformed", "disconnect")


@dataclass(frozen=True)
class FaultConfig:
    error_rates: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    stall_ms: float = 0.0
    stall_every_s: float = 0.0
    oom_crash: bool = False
    http_5xx_status: int = 503
    http_4xx_status: int = 429

    def __post_init__(self) -> None:
        unknown = set(self.error_rates) - set(FAULT_CLASSES)
        if unknown:
            raise ValueError(f"unknown fault class(es) {sorted(unknown)}; known: {', '.join(FAULT_CLASSES)}")
        for name, rate in self.error_rates.items():
            if not 0.0 <= rate <= 1.0 or math.isnan(rate):
                raise ValueError(f"fault rate {name}={rate} must be in [0, 1]")
        if sum(self.error_rates.values()) > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {sum(self.error_rates.values()):.3f}, more than 1")
        if self.stall_ms < 0 or self.stall_every_s < 0:
            raise ValueError(f"stall_ms and stall_every_s must be >= 0 (got {self.stall_ms}, {self.stall_every_s})")
        if self.stall_ms > 0 and self.stall_every_s <= 0:
            raise ValueError("a stall needs stall_every_s > 0 (how often it happens)")
        if not 500 <= self.http_5xx_status <= 599 or not 400 <= self.http_4xx_status <= 499:
            raise ValueError(
                f"http_5xx_status must be 5xx and http_4xx_status 4xx (got {self.http_5xx_status}, "
                f"{self.http_4xx_status})"
            )
        object.__setattr__(self, "error_rates", MappingProxyType(dict(self.error_rates)))

    @property
    def any(self) -> bool:
        return bool(sum(self.error_rates.values())) or self.stall_ms > 0 or self.oom_crash

    def draw(self, rng: random.Random) -> str | None:
        """The fault class for one request, or None."""
        if not self.error_rates:
            return None
        u = rng.random()
        acc = 0.0
        for name in FAULT_CLASSES:
            acc += self.error_rates.get(name, 0.0)
            if u < acc:
                return name
        return None

    def to_dict(self) -> dict[str, object]:
        return {
            "error_rates": dict(self.error_rates),
            "stall_ms": self.stall_ms,
            "stall_every_s": self.stall_every_s,
            "oom_crash": self.oom_crash,
            "http_5xx_status": self.http_5xx_status,
            "http_4xx_status": self.http_4xx_status,
        }


def parse_rates(items: Iterable[str]) -> dict[str, float]:
    """``["http_5xx=0.05", "reset=0.01"]`` -> ``{"http_5xx": 0.05, "reset": 0.01}``."""
    rates: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"fault rate {item!r} must look like CLASS=RATE, e.g. http_5xx=0.05")
        try:
            rates[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"fault rate {item!r}: {value!r} is not a number") from None
    return rates


def load_fault_file(path: Path) -> dict[str, object]:
    """Read fault settings from a .toml or .json file with FaultConfig's field names."""
    text = path.read_text()
    data: object = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a table of fault settings")
    known = set(FaultConfig.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{path}: unknown fault setting(s) {sorted(unknown)}; known: {', '.join(sorted(known))}")
    return data
