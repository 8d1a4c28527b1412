"""Edge mode: unified memory shared with the OS, bandwidth-bound speed, users at a target, quantization, and
llama.cpp flags that follow from the figures."""

from __future__ import annotations

import pytest

from llm_knee.catalog import get_dtype, get_gpu, get_model
from llm_knee.catalog.hardware import GIB
from llm_knee.plan.inputs import Lengths, parse_plan_slo
from llm_knee.plan.planner import CapacityPlan, PlanRequest, make_plan, step_model
from llm_knee.plan.speed import Curves

ORIN_BW = 204.8e9


def edge_plan(dtype: str = "q4_k_m", slo: str = "tok_s_per_user=10", **kw: object) -> CapacityPlan:
    req = PlanRequest(
        model=get_model("llama-3.1-8b"),
        gpu=get_gpu("jetson-agx-orin-64gb"),
        dtype=get_dtype(dtype),
        lengths=Lengths.parse("512", "256"),
        slo=parse_plan_slo(slo),
        **kw,  # type: ignore[arg-type]
    )
    return make_plan(req)


def test_memory_is_shared_with_the_os() -> None:
    plan = edge_plan()
    assert plan.edge is not None
    assert plan.edge.os_reserve_bytes == 6 * GIB  # stated default
    assert plan.memory.usable_bytes_per_gpu == pytest.approx(58 * GIB, rel=1e-15)  # no 0.9 factor: llama.cpp
    assert plan.memory.kv_dtype == "fp16"  # llama.cpp's default cache type
    smaller = edge_plan(os_reserve_bytes=20 * GIB)
    assert smaller.memory.max_concurrency_memory < plan.memory.max_concurrency_memory


def test_bandwidth_bound_speed_of_one_user_by_hand() -> None:
    plan = edge_plan()
    assert plan.edge is not None
    read = (8_030_261_248 - 128256 * 4096) * 4.89 / 8  # Q4_K_M weights, all but the embedding lookup
    kv = (640 + 1) * 2 * 32 * 8 * 128 * 2
    assert plan.edge.bandwidth_bound_tok_s_one_user == pytest.approx(ORIN_BW * 0.65 / (read + kv), rel=1e-12)
    assert plan.edge.tok_s_one_user < plan.edge.bandwidth_bound_tok_s_one_user  # step overheads on top


def test_users_at_target_is_the_last_concurrency_meeting_it() -> None:
    plan = edge_plan()
    assert plan.edge is not None
    users = plan.edge.users_at_target
    curves = Curves(step_model(plan.request), plan.request.lengths)
    assert users >= 1
    assert 1 / curves.tpot(users) >= 10 > 1 / curves.tpot(users + 1)


def test_quantization_effect_fp16_q8_q4() -> None:
    plan = edge_plan()
    assert plan.edge is not None
    rows = {r.dtype: r for r in plan.edge.quantization}
    assert list(rows) == ["fp16", "q8_0", "q4_k_m"]
    assert rows["fp16"].weights_bytes == 8_030_261_248 * 2
    assert rows["q8_0"].weights_bytes == pytest.approx(8_030_261_248 * 8.5 / 8)
    speeds = [rows[d].bandwidth_bound_tok_s_one_user for d in ("fp16", "q8_0", "q4_k_m")]
    assert speeds == sorted(speeds)  # fewer bytes per weight, faster decode
    assert rows["q4_k_m"].max_concurrency_memory == plan.memory.max_concurrency_memory
    assert rows["q4_k_m"].users_at_target == plan.edge.users_at_target


def test_llama_cpp_flags_follow_the_figures() -> None:
    plan = edge_plan()
    assert plan.edge is not None
    flags = {f.flag: f for f in plan.edge.llama_cpp_flags}
    parallel = int(flags["--parallel"].value)
    assert parallel == plan.edge.users_at_target
    assert int(flags["-c"].value) == parallel * 768
    assert flags["--threads"].value == "12"  # Jetson AGX Orin 64GB: 12 Cortex-A78AE cores
    assert flags["-ngl"].value == "99"
    assert int(flags["--batch-size"].value) >= 512
    assert all(f.reason for f in plan.edge.llama_cpp_flags)
    assert plan.edge.command.startswith("llama-server -m MODEL.gguf -ngl 99 --parallel")


def test_edge_rejects_tensor_parallel_and_the_os_reserve_is_edge_only() -> None:
    with pytest.raises(ValueError, match="tensor parallel does not apply"):
        edge_plan(tp=2)
    with pytest.raises(ValueError, match="unified-memory devices only"):
        make_plan(
            PlanRequest(
                get_model("llama-3.1-8b"), get_gpu("h100"), get_dtype("bf16"), Lengths.parse("512", "256"),
                os_reserve_bytes=GIB,
            )
        )  # fmt: skip
