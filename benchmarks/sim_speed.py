"""How fast the discrete-event engine simulates: one hour of saturated traffic, on one core.

Run:  python benchmarks/sim_speed.py [--hours 1] [--concurrency 64] [--keep-records] [--cpu 0]

Workload (issue 3's figure): Llama-3.1-8B, BF16, one H100-SXM, fixed 512 prompt / 256 output tokens,
closed loop with 64 users, default vLLM knobs. Every finished request becomes a full RequestRecord
(per-token gaps included); by default each record is handed to a callback that tallies it and drops it
(what a streaming writer does); --keep-records keeps them all in memory as simulate_closed_loop's
default does. Target: 3600 simulated seconds in <= 10 s of wall time.
"""

from __future__ import annotations

import argparse
import os
import time

from llm_knee.records.schema import RequestRecord
from llm_knee.sim.runs import SimConfig, fixed_lengths, simulate_closed_loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--keep-records", action="store_true", help="keep every record in memory")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core (default: the first allowed)")
    args = parser.parse_args()

    allowed = sorted(os.sched_getaffinity(0))
    cpu = args.cpu if args.cpu is not None else allowed[0]
    os.sched_setaffinity(0, {cpu})

    config = SimConfig.from_catalog("Llama-3.1-8B", "H100-SXM", "bf16")
    duration = args.hours * 3600
    tally = {"records": 0, "tokens": 0, "measured_tokens": 0}

    def count(rec: RequestRecord) -> None:
        tally["records"] += 1
        tally["tokens"] += rec.output_tokens

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    result = simulate_closed_loop(
        config,
        args.concurrency,
        duration,
        sampler=fixed_lengths(args.input_len, args.output_len),
        seed=1,
        ramp_up_s=5.0,
        on_record=None if args.keep_records else count,
    )
    wall = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    if args.keep_records:
        tally["records"] = len(result.records)
        tally["tokens"] = sum(r.output_tokens for r in result.records)
    sim_s = result.stats.sim_end_ns / 1e9
    print(f"workload      Llama-3.1-8B bf16, 1 x H100-SXM, {args.input_len}/{args.output_len} tokens, "
          f"closed loop x{args.concurrency}, {duration:.0f} s simulated (+ drain)")  # fmt: skip
    print(f"pinned        core {cpu}; records {'kept in memory' if args.keep_records else 'streamed to a callback'}")
    print(f"simulated     {sim_s:,.1f} s, {result.stats.steps:,} engine steps, {tally['records']:,} requests, "
          f"{tally['tokens']:,} output tokens ({tally['tokens'] / sim_s:,.0f} tok/s simulated)")  # fmt: skip
    print(f"wall          {wall:.2f} s (cpu {cpu_s:.2f} s)")
    print(f"speed         {sim_s / wall:,.0f} simulated seconds per wall second; "
          f"{result.stats.steps / wall:,.0f} steps/s; {wall / sim_s * 3600:.2f} s wall per simulated hour "
          f"(target <= 10 s)")  # fmt: skip


if __name__ == "__main__":
    main()
