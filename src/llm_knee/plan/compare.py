"""Compare cards: the same model and request mix planned on each GPU, one row per card.

A card on which the model does not fit at the asked tensor-parallel degree is planned at the smallest
degree that fits and meets the targets (or, failing that, the smallest that fits) when auto_tp (--tp not
given); a card on which nothing fits gets a row saying so, with its shortfall.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llm_knee.catalog.hardware import GpuSpec
from llm_knee.plan.planner import CapacityPlan, PlanRequest, make_plan
from llm_knee.plan.roofline import DoesNotFitError, valid_tp_sizes


@dataclass(frozen=True)
class CompareRow:
    gpu: str
    fits: bool
    tp: int | None
    max_concurrency_memory: int | None
    predicted_knee: int | None
    binding: tuple[str, ...]
    tok_s_per_user_at_knee: float | None
    replica_qps: float | None
    gpus_needed: int | None
    gpus_needed_with_headroom: int | None
    price_per_gpu_hour: float | None
    usd_per_mtok_at_knee: float | None
    note: str
    plan: CapacityPlan | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "plan"}
        d["binding"] = list(self.binding)
        return d


def _row(plan: CapacityPlan, note: str) -> CompareRow:
    k = plan.speed.at_knee
    return CompareRow(
        gpu=plan.request.gpu.name,
        fits=True,
        tp=plan.request.tp,
        max_concurrency_memory=plan.memory.max_concurrency_memory,
        predicted_knee=plan.predicted_knee,
        binding=plan.speed.binding,
        tok_s_per_user_at_knee=None if k is None else k.tok_s_per_user,
        replica_qps=plan.fleet.replica_qps,
        gpus_needed=plan.fleet.gpus_needed,
        gpus_needed_with_headroom=plan.fleet.gpus_needed_with_headroom,
        price_per_gpu_hour=plan.request.price_per_gpu_hour,
        usd_per_mtok_at_knee=plan.fleet.usd_per_mtok_at_knee,
        note=note,
        plan=plan,
    )


def _unfit(gpu: str, price: float | None, note: str) -> CompareRow:
    return CompareRow(
        gpu=gpu, fits=False, tp=None, max_concurrency_memory=None, predicted_knee=None, binding=(),
        tok_s_per_user_at_knee=None, replica_qps=None, gpus_needed=None, gpus_needed_with_headroom=None,
        price_per_gpu_hour=price, usd_per_mtok_at_knee=None, note=note,
    )  # fmt: skip


def compare_gpus(
    base: PlanRequest, gpus: list[GpuSpec], prices: list[float | None], *, auto_tp: bool = True
) -> list[CompareRow]:
    """One row per card, in the order given; prices[i] is card i's $/GPU-hour (or None)."""
    if len(prices) != len(gpus):
        raise ValueError(f"{len(prices)} prices for {len(gpus)} cards: give one price, or one per card")
    rows: list[CompareRow] = []
    for gpu, price in zip(gpus, prices, strict=True):
        req = replace(base, gpu=gpu, price_per_gpu_hour=price, gpus=None)
        if gpu.unified_memory:
            req = replace(req, tp=1)
        try:
            rows.append(_row(make_plan(req), ""))
            continue
        except DoesNotFitError as exc:
            first_error = exc
        fitted: CapacityPlan | None = None
        if auto_tp and not gpu.unified_memory and gpu.interconnect_bytes_s is not None:
            # The smallest degree that fits and meets the targets; else the smallest that fits at all.
            for tp in valid_tp_sizes(base.model):
                if tp <= req.tp:
                    continue
                try:
                    candidate = make_plan(replace(req, tp=tp))
                except DoesNotFitError:
                    continue
                if fitted is None or fitted.predicted_knee == 0:
                    fitted = candidate
                if candidate.predicted_knee > 0:
                    break
        if fitted is not None:
            rows.append(_row(fitted, f"needs tp {fitted.request.tp}"))
        else:
            note = f"does not fit: short by {first_error.shortfall_gib:.2f} GiB per GPU"
            rows.append(_unfit(gpu.name, price, note))
    return rows
