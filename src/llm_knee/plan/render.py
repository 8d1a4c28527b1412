"""Console views of plans (rich). Describing only: the CLI owns the console and decides what is printed."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from llm_knee.plan.compare import CompareRow
from llm_knee.plan.explain import GIB, Figure, explain_lines, show
from llm_knee.plan.planner import CapacityPlan
from llm_knee.plan.simulate import SimulatedKnee


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:,.1f}"


def _gib(b: float) -> str:
    return show(b, "B")


def _title(plan: CapacityPlan) -> Text:
    r = plan.request
    gpus = f"{r.tp} x {r.gpu.name}" if r.tp > 1 else r.gpu.name
    return Text.assemble(
        ("Plan: ", "bold"),
        (f"{r.model.name} in {r.dtype.name} (KV {plan.memory.kv_dtype}) on {gpus}", "bold cyan"),
        f"; requests {r.lengths.input} -> {r.lengths.output} tokens",
    )


def memory_table(plan: CapacityPlan) -> Table:
    m = plan.memory
    t = Table(title="Memory (per GPU unless said)", title_justify="left", show_header=True)
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("how")
    t.add_row("weights (whole model)", _gib(m.weights_bytes), f"{m.dtype}; {_gib(m.weights_bytes_per_gpu)} per GPU")
    t.add_row(
        "KV per token", f"{m.kv_bytes_per_token:,.0f} B", f"2 x layers x KV heads x head dim x {m.kv_dtype} bytes"
    )
    t.add_row("KV per request", _gib(m.kv_bytes_per_request), f"x {m.request_tokens} tokens (prompt + output)")
    usable = f"{m.gpu_memory_utilization:g} of {m.gpu_memory_bytes / GIB:g} GiB"
    if m.unified_memory:
        usable += f" minus {m.os_reserve_bytes / GIB:g} GiB OS/CPU reserve (shared memory, assumed)"
    t.add_row("usable", _gib(m.usable_bytes_per_gpu), usable)
    t.add_row("runtime reserve", _gib(m.runtime_reserve_bytes), "CUDA context, workspaces, activations, logits")
    t.add_row("left for KV", _gib(m.kv_free_bytes_per_gpu), "usable - weights - reserve")
    t.add_row("KV capacity", f"{m.kv_capacity_tokens:,} tok", "left for KV / KV per token")
    t.add_row(
        "max concurrency (exact)", f"{m.max_concurrency_memory:,}", f"floor(capacity / {m.request_tokens}) at {usable}"
    )
    t.add_row(
        "max concurrency (0.85 safety)",
        f"{m.max_concurrency_memory_safe:,}",
        f"same with usable fraction {m.safe_usable_fraction:.4g} (domain.md §5)",
    )
    return t


def ladder_table(plan: CapacityPlan) -> Table:
    s = plan.speed
    t = Table(title="Speed (closed loop, steady state)", title_justify="left")
    for name in ("conc.", "decode step ms", "mean step ms", "tok/s/user", "tok/s total", "TTFT ms", "E2E s", "QPS"):
        t.add_column(name, justify="right")
    t.add_column("bound")
    t.add_column("")
    for r in s.ladder:
        marks = []
        if r.concurrency == s.predicted_knee:
            marks.append("<- knee")
        if r.concurrency == plan.memory.max_concurrency_memory:
            marks.append("memory limit")
        style = "bold" if r.concurrency == s.predicted_knee else None
        t.add_row(
            f"{r.concurrency:,}", _ms(r.decode_step_s), _ms(r.mean_step_s), f"{r.tok_s_per_user:,.1f}",
            f"{r.tok_s_total:,.0f}", _ms(r.ttft_s), f"{r.e2e_s:,.2f}", f"{r.qps:,.2f}", r.bound, ", ".join(marks),
            style=style,
        )  # fmt: skip
    return t


def knee_table(plan: CapacityPlan) -> Table:
    s = plan.speed
    t = Table(title="Predicted knee = the smallest of", title_justify="left")
    t.add_column("candidate")
    t.add_column("concurrency", justify="right")
    t.add_column("rule")
    for c in s.candidates:
        t.add_row(c.name, "does not bind" if c.concurrency is None else f"{c.concurrency:,}", c.reason)
    return t


def knee_line(plan: CapacityPlan) -> Text:
    s = plan.speed
    if s.predicted_knee == 0:
        return Text(
            f"Predicted knee: none - no concurrency meets {', '.join(s.binding)} "
            f"(one user gets {s.ladder[0].tok_s_per_user:.1f} tok/s, TTFT {_ms(s.ladder[0].ttft_s)} ms)",
            style="bold red",
        )
    k = s.at_knee
    assert k is not None
    return Text.assemble(
        ("Predicted knee: ", "bold"),
        (f"{s.predicted_knee:,} concurrent requests", "bold green"),
        f" (bound by {', '.join(s.binding)}); {k.tok_s_per_user:.1f} tok/s per user, TTFT {_ms(k.ttft_s)} ms, "
        f"E2E {k.e2e_s:.2f} s; prefill of one {s.prefill_tokens}-token prompt alone {_ms(s.prefill_time_s)} ms",
    )


def fleet_lines(plan: CapacityPlan) -> list[Text]:
    f = plan.fleet
    out = [
        Text(
            f"Replica ({f.gpus_per_replica} GPU) at the knee: {f.replica_qps:,.2f} req/s, "
            f"{f.replica_output_tok_s:,.0f} output tok/s (Little's law: knee / E2E)"
        ),
        Text(f"Efficiency {f.efficiency:g}: {f.efficiency_source}"),
    ]
    if f.target_qps is not None:
        if f.gpus_needed is None:
            out.append(Text(f"Target {f.target_qps:g} req/s: {f.note}", style="bold red"))
        else:
            out.append(
                Text.assemble(
                    (f"Target {f.target_qps:g} req/s: ", "bold"),
                    (f"{f.gpus_needed} GPUs", "bold green"),
                    f" ({f.replicas_needed} replicas x {f.gpus_per_replica}); with {f.headroom:.0%} headroom "
                    f"{f.gpus_needed_with_headroom} GPUs",
                )
            )
    if f.gpus_available is not None:
        out.append(Text(f"The {f.gpus_available} GPUs given ({f.replicas_available} replicas) serve about "
                        f"{f.qps_available or 0:,.2f} req/s at efficiency {f.efficiency:g}"))  # fmt: skip
    if f.price_per_gpu_hour is not None:
        text = f"Cost: ${f.usd_per_hour or 0:,.2f}/hour for {f.usd_per_hour_basis}"
        if f.usd_per_mtok_at_knee is not None:
            text += f"; ${f.usd_per_mtok_at_knee:,.3f} per million output tokens (one replica at its knee)"
        if f.fleet_usd_per_mtok is not None:
            text += f"; ${f.fleet_usd_per_mtok:,.3f}/Mtok for the fleet at the target"
        out.append(Text(text))
    return out


def tp_table(plan: CapacityPlan) -> Table | None:
    if not plan.tp_options:
        return None
    t = Table(title="Replicas vs tensor parallel (every TP degree that fits)", title_justify="left")
    for name in ("tp", "max conc.", "knee", "tok/s/user", "replica QPS", "QPS per GPU", "GPUs for target"):
        t.add_column(name, justify="right")
    for o in plan.tp_options:
        t.add_row(
            str(o.tp), f"{o.max_concurrency_memory:,}", f"{o.predicted_knee:,}",
            "-" if o.tok_s_per_user_at_knee is None else f"{o.tok_s_per_user_at_knee:,.1f}",
            f"{o.replica_qps:,.2f}", f"{o.qps_per_gpu:,.2f}", "-" if o.gpus_needed is None else str(o.gpus_needed),
        )  # fmt: skip
    return t


def tp_sentence(plan: CapacityPlan) -> Text | None:
    opts = plan.tp_options
    if len(opts) < 2:
        return None
    per_gpu = max(opts, key=lambda o: o.qps_per_gpu)
    fastest = max(opts, key=lambda o: o.tok_s_per_user_at_knee or 0.0)
    return Text(
        f"Most requests per GPU: tp {per_gpu.tp} ({per_gpu.qps_per_gpu:.2f} req/s per GPU) - more, smaller "
        f"replicas; fastest per user: tp {fastest.tp} ({fastest.tok_s_per_user_at_knee or 0:.1f} tok/s) - the "
        "weights stream from more GPUs' memory at once, paid for in all-reduces and fewer replicas."
    )


def edge_renderables(plan: CapacityPlan) -> list[RenderableType]:
    e = plan.edge
    if e is None:
        return []
    head = Text(
        f"Edge ({e.device}, unified memory shared with the OS and CPU; {e.os_reserve_bytes / GIB:g} GiB OS reserve "
        f"assumed): one user {e.bandwidth_bound_tok_s_one_user:.1f} tok/s bandwidth-bound, {e.tok_s_one_user:.1f} "
        f"tok/s with step overheads; {e.users_at_target} users each get >= {e.tok_s_target:g} tok/s"
    )
    q = Table(title="Quantization (llama.cpp, f16 KV cache)", title_justify="left")
    for name in ("format", "weights", "fits", "max conc.", "tok/s 1 user (bw bound)", "users at target"):
        q.add_column(name, justify="right")
    for row in e.quantization:
        q.add_row(
            row.dtype, _gib(row.weights_bytes),
            "yes" if row.fits else f"no (short {row.shortfall_gib:.2f} GiB)",
            "-" if row.max_concurrency_memory is None else f"{row.max_concurrency_memory:,}",
            f"{row.tok_s_one_user:.1f} ({row.bandwidth_bound_tok_s_one_user:.1f})",
            "-" if row.users_at_target is None else str(row.users_at_target),
        )  # fmt: skip
    f = Table(title="Suggested llama.cpp flags", title_justify="left")
    f.add_column("flag")
    f.add_column("value", justify="right")
    f.add_column("why")
    for fl in e.llama_cpp_flags:
        f.add_row(fl.flag, fl.value, fl.reason)
    return [head, q, f, Text(e.command, style="bold")]


def sim_table(plan: CapacityPlan, sim: SimulatedKnee) -> RenderableType:
    t = Table(title="Simulated ladder (engine simulator, same step-time model)", title_justify="left")
    for name in (
        "conc.",
        "output tok/s",
        "req/s",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "tok/s/user p50",
        "SLO met",
        "preempt.",
    ):
        t.add_column(name, justify="right")
    for s, p in zip(sim.summaries, sim.preemptions, strict=True):
        t.add_row(
            f"{s.level:g}", f"{s.output_tok_s:,.0f}", f"{s.req_s:,.2f}",
            "-" if s.ttft_p99_ms is None else f"{s.ttft_p99_ms:,.1f}",
            "-" if s.tpot_p50_ms is None else f"{s.tpot_p50_ms:,.1f}",
            "-" if s.decode_tok_s_per_user_p50 is None else f"{s.decode_tok_s_per_user_p50:,.1f}",
            show(s.slo_met, ""), str(p),
        )  # fmt: skip
    rec = sim.recommendation
    line = Text.assemble(
        ("Simulated knee: ", "bold"),
        ("-" if sim.knee is None else f"{sim.knee:g}", "bold green"),
        f"  beside predicted {plan.predicted_knee:,}. {rec.sentence}",
    )
    return Group(t, line)


def print_plan(console: Console, plan: CapacityPlan, sim: SimulatedKnee | None = None, explain: bool = False) -> None:
    console.print(_title(plan))
    console.print(Text(plan.request.lengths.describe(), style="dim"))
    console.print(memory_table(plan))
    console.print(ladder_table(plan))
    console.print(knee_table(plan))
    console.print(knee_line(plan))
    for line in fleet_lines(plan):
        console.print(line)
    tp = tp_table(plan)
    if tp is not None:
        console.print(tp)
        sentence = tp_sentence(plan)
        if sentence is not None:
            console.print(sentence)
    for r in edge_renderables(plan):
        console.print(r)
    if sim is not None:
        console.print(sim_table(plan, sim))
    for note in plan.notes:
        console.print(Text(f"note: {note}", style="dim"))
    if explain:
        print_explain(console, plan.figures())


def print_explain(console: Console, figures: Sequence[Figure]) -> None:
    console.print(Text("Every figure, its formula and its inputs", style="bold underline"))
    for line in explain_lines(figures):
        console.print(Text(line))


def compare_table(rows: Sequence[CompareRow], target: float | None) -> Table:
    t = Table(title="Compare cards (same model, lengths and targets)", title_justify="left")
    for name in ("GPU", "fits", "GPUs/replica", "max conc.", "knee", "tok/s/user at knee", "replica QPS"):
        t.add_column(name, justify="right" if name not in ("GPU", "fits") else "left")
    t.add_column(f"GPUs for {target:g} req/s (+25 %)" if target is not None else "GPUs for target", justify="right")
    t.add_column("$/Mtok", justify="right")
    t.add_column("note")
    for r in rows:
        gpus = "-" if r.gpus_needed is None else f"{r.gpus_needed} ({r.gpus_needed_with_headroom})"
        t.add_row(
            r.gpu, "yes" if r.fits else "no", "-" if r.tp is None else str(r.tp),
            "-" if r.max_concurrency_memory is None else f"{r.max_concurrency_memory:,}",
            "-" if r.predicted_knee is None else f"{r.predicted_knee:,}",
            "-" if r.tok_s_per_user_at_knee is None else f"{r.tok_s_per_user_at_knee:,.1f}",
            "-" if r.replica_qps is None else f"{r.replica_qps:,.2f}", gpus,
            "-" if r.usd_per_mtok_at_knee is None else f"{r.usd_per_mtok_at_knee:,.3f}", r.note,
        )  # fmt: skip
    return t
