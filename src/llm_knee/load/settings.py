"""How a sweep is run: ladder, durations, warm-up and the steady-state rule."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

DEFAULT_LADDER: tuple[float, ...] = (1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64)


@dataclass(frozen=True)
class LoadSettings:
    """Closed loop: ``levels`` are concurrencies (virtual users). Open loop: offered rates in req/s.

    Steady state: a level's output throughput is estimated over consecutive windows of
    ``stability_window_s``; once the last ``stability_windows`` estimates have a coefficient of variation
    at most ``stability_cv`` — and at least ``min_duration_s`` of measurement and ``min_requests``
    completions are in — the level ends early. Otherwise it ends at ``max_duration_s`` of measurement.
    Ramp-up (closed loop): a level's users start spread over the previous level's median E2E, so that
    fixed-length requests do not stay in lock-step. Warm-up: every level then runs until each virtual
    user has finished one request (the synchronised
    first burst is not representative), at least ``warmup_s`` and at most ``warmup_max_s``; requests sent
    during it are kept on disk, flagged, and left out of the figures. Before the first level,
    ``warmup_requests`` requests are sent one at a time and discarded the same way (model load, kernel
    compilation, caches).
    """

    mode: Literal["closed", "open"] = "closed"
    levels: tuple[float, ...] = DEFAULT_LADDER
    arrival: Literal["constant", "poisson"] = "poisson"
    max_duration_s: float = 60.0
    min_duration_s: float = 10.0
    warmup_s: float = 0.0
    warmup_max_s: float = 60.0
    warmup_requests: int = 2
    stability_window_s: float = 2.0
    stability_windows: int = 3
    stability_cv: float = 0.05
    min_requests: int = 10
    max_requests_per_level: int | None = None
    max_in_flight: int = 10_000  # open loop: requests beyond this wait in the client (reported as queueing)
    drain_timeout_s: float | None = None  # default: the client's total timeout
    # Closed loop: start a level's users spread over the previous level's median request duration.
    ramp_up: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.levels:
            raise ValueError("no levels given: pass e.g. --levels 1,2,4,8")
        if any(lv <= 0 for lv in self.levels):
            raise ValueError(f"levels must be positive, got {list(self.levels)}")
        if list(self.levels) != sorted(set(self.levels)):
            raise ValueError(f"levels must be strictly increasing, got {list(self.levels)}")
        if self.mode == "closed" and any(lv != int(lv) for lv in self.levels):
            raise ValueError(f"closed-loop levels are user counts and must be whole numbers: {list(self.levels)}")
        if self.max_duration_s <= 0 or self.min_duration_s < 0 or self.min_duration_s > self.max_duration_s:
            raise ValueError(
                f"need 0 <= min duration ({self.min_duration_s}) <= max duration "
                f"({self.max_duration_s}) and a positive max duration"
            )
        if self.stability_windows < 2 or self.stability_window_s <= 0 or self.stability_cv <= 0:
            raise ValueError("steady state needs >= 2 windows of positive length and a positive CV bound")
        if self.warmup_s < 0 or self.warmup_max_s < self.warmup_s or self.warmup_requests < 0:
            raise ValueError("warm-up settings must be non-negative with warmup_s <= warmup_max_s")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadSettings:
        known = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in data.items() if k in known}
        kw["levels"] = tuple(kw.get("levels", DEFAULT_LADDER))
        return cls(**kw)
