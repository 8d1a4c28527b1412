"""Fleet side of a plan: one replica's QPS at the knee, GPUs for a target QPS, cost, replicas vs TP.

replica QPS     = knee / E2E(knee)                                   (Little's law)
replicas        = ceil(target / (replica QPS x efficiency))          (domain.md §5)
GPUs needed     = replicas x GPUs per replica (= tp)
with headroom   = ceil(target x (1 + 0.25) / (replica QPS x efficiency)) x tp
                  (25 %: the middle of the practitioners' 20-30 %)
$/hour          = GPUs x price per GPU-hour
$/M output tok  = $/hour / (output tokens per hour) x 1e6
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_knee.plan.explain import Figure, num

HEADROOM = 0.25


@dataclass(frozen=True)
class FleetPlan:
    gpus_per_replica: int
    knee: int
    e2e_s_at_knee: float | None
    replica_qps: float
    output_tokens_per_request: float
    efficiency: float
    efficiency_source: str
    headroom: float
    target_qps: float | None
    replicas_needed: int | None
    gpus_needed: int | None
    gpus_needed_with_headroom: int | None
    gpus_available: int | None
    replicas_available: int | None
    qps_available: float | None  # replicas available x replica QPS x efficiency
    price_per_gpu_hour: float | None
    usd_per_hour: float | None  # for the fleet sized with headroom, else the GPUs given, else one replica
    usd_per_hour_basis: str
    usd_per_mtok_at_knee: float | None  # one replica busy at its knee
    fleet_usd_per_mtok: float | None  # the headroom-sized fleet serving exactly the target
    note: str

    @property
    def replica_output_tok_s(self) -> float:
        return self.replica_qps * self.output_tokens_per_request

    def figures(self) -> list[Figure]:
        figs = [
            Figure(
                "replica_qps",
                f"QPS of one replica ({self.gpus_per_replica} GPU) at the knee",
                self.replica_qps,
                "req/s",
                "knee / E2E(knee)  (Little's law)",
                f"{self.knee} / {num(self.e2e_s_at_knee) if self.e2e_s_at_knee is not None else '-'}",
            ),
            Figure(
                "efficiency",
                "Fleet efficiency",
                self.efficiency,
                "",
                "fraction of the single-replica QPS a loaded fleet achieves",
                self.efficiency_source,
            ),
        ]
        if self.target_qps is not None:
            per = self.replica_qps * self.efficiency
            figs += [
                Figure(
                    "gpus_needed",
                    "GPUs for the target",
                    self.gpus_needed,
                    "GPUs",
                    "ceil(target / (replica QPS x efficiency)) x GPUs per replica",
                    f"ceil({num(self.target_qps)} / ({num(self.replica_qps)} x {num(self.efficiency)})) x "
                    f"{self.gpus_per_replica}",
                ),
                Figure(
                    "gpus_needed_with_headroom",
                    f"GPUs for the target with {self.headroom:.0%} headroom",
                    self.gpus_needed_with_headroom,
                    "GPUs",
                    "ceil(target x (1 + headroom) / (replica QPS x efficiency)) x GPUs per replica",
                    f"ceil({num(self.target_qps)} x {num(1 + self.headroom)} / {num(per)}) x {self.gpus_per_replica}",
                ),
            ]
        if self.gpus_available is not None:
            figs.append(
                Figure(
                    "qps_available",
                    f"QPS of the {self.gpus_available} GPUs given",
                    self.qps_available,
                    "req/s",
                    "floor(GPUs / tp) x replica QPS x efficiency",
                    f"{self.replicas_available} x {num(self.replica_qps)} x {num(self.efficiency)}",
                )
            )
        if self.price_per_gpu_hour is not None:
            figs += [
                Figure(
                    "usd_per_hour",
                    "Cost per hour",
                    self.usd_per_hour,
                    "$/h",
                    "GPUs x price per GPU-hour",
                    f"{self.usd_per_hour_basis} x {num(self.price_per_gpu_hour)}",
                ),
                Figure(
                    "usd_per_mtok_at_knee",
                    "$ per million output tokens (one replica at its knee)",
                    self.usd_per_mtok_at_knee,
                    "$/Mtok",
                    "GPUs per replica x price / (replica QPS x output tokens x 3600) x 1e6",
                    f"{self.gpus_per_replica} x {num(self.price_per_gpu_hour)} / ({num(self.replica_qps)} x "
                    f"{num(self.output_tokens_per_request)} x 3600) x 1e6",
                ),
            ]
            if self.fleet_usd_per_mtok is not None and self.target_qps is not None:
                figs.append(
                    Figure(
                        "fleet_usd_per_mtok",
                        "$ per million output tokens (fleet with headroom, at the target)",
                        self.fleet_usd_per_mtok,
                        "$/Mtok",
                        "GPUs with headroom x price / (target x output tokens x 3600) x 1e6",
                        f"{self.gpus_needed_with_headroom} x {num(self.price_per_gpu_hour)} / "
                        f"({num(self.target_qps)} x {num(self.output_tokens_per_request)} x 3600) x 1e6",
                    )
                )
        return figs


def plan_fleet(
    *,
    knee: int,
    e2e_s_at_knee: float | None,
    gpus_per_replica: int,
    output_tokens_per_request: float,
    efficiency: float,
    efficiency_source: str,
    target_qps: float | None = None,
    gpus_available: int | None = None,
    price_per_gpu_hour: float | None = None,
    headroom: float = HEADROOM,
) -> FleetPlan:
    if target_qps is not None and not target_qps > 0:
        raise ValueError(f"--target-qps must be > 0, got {target_qps:g}")
    if price_per_gpu_hour is not None and not price_per_gpu_hour >= 0:
        raise ValueError(f"--price-per-gpu-hour must be >= 0, got {price_per_gpu_hour:g}")
    if gpus_available is not None and gpus_available % gpus_per_replica:
        raise ValueError(
            f"--gpus {gpus_available} is not a multiple of the {gpus_per_replica} GPUs of one replica (--tp)"
        )
    note = ""
    qps = knee / e2e_s_at_knee if knee > 0 and e2e_s_at_knee else 0.0
    replicas = gpus = gpus_headroom = None
    if target_qps is not None:
        if qps > 0:
            per = qps * efficiency
            replicas = math.ceil(target_qps / per)
            gpus = replicas * gpus_per_replica
            gpus_headroom = math.ceil(target_qps * (1.0 + headroom) / per) * gpus_per_replica
        else:
            note = "no concurrency meets the targets, so no number of GPUs serves the target QPS"
    replicas_available = None if gpus_available is None else gpus_available // gpus_per_replica
    qps_available = None if replicas_available is None else replicas_available * qps * efficiency
    usd_h: float | None = None
    basis = ""
    usd_knee: float | None = None
    fleet_usd: float | None = None
    if price_per_gpu_hour is not None:
        if gpus_headroom is not None:
            basis = f"{gpus_headroom} GPUs (target with headroom)"
            usd_h = gpus_headroom * price_per_gpu_hour
        elif gpus_available is not None:
            basis = f"{gpus_available} GPUs (--gpus)"
            usd_h = gpus_available * price_per_gpu_hour
        else:
            basis = f"{gpus_per_replica} GPUs (one replica)"
            usd_h = gpus_per_replica * price_per_gpu_hour
        if qps > 0:
            usd_knee = gpus_per_replica * price_per_gpu_hour / (qps * output_tokens_per_request * 3600.0) * 1e6
        if gpus_headroom is not None and target_qps is not None:
            fleet_usd = gpus_headroom * price_per_gpu_hour / (target_qps * output_tokens_per_request * 3600.0) * 1e6
    return FleetPlan(
        gpus_per_replica=gpus_per_replica,
        knee=knee,
        e2e_s_at_knee=e2e_s_at_knee,
        replica_qps=qps,
        output_tokens_per_request=output_tokens_per_request,
        efficiency=efficiency,
        efficiency_source=efficiency_source,
        headroom=headroom,
        target_qps=target_qps,
        replicas_needed=replicas,
        gpus_needed=gpus,
        gpus_needed_with_headroom=gpus_headroom,
        gpus_available=gpus_available,
        replicas_available=replicas_available,
        qps_available=qps_available,
        price_per_gpu_hour=price_per_gpu_hour,
        usd_per_hour=usd_h,
        usd_per_hour_basis=basis,
        usd_per_mtok_at_knee=usd_knee,
        fleet_usd_per_mtok=fleet_usd,
        note=note,
    )
