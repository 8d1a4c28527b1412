"""Our normalised telemetry metric names: the vocabulary shared by samplers, summaries and verdicts.

Samplers translate whatever their source calls a quantity into one of these names, so analysis never
needs to know whether a number came from NVML, /proc, or a vLLM or llama.cpp ``/metrics`` page.
Units are in the name where one applies. Names ending in ``_total``, ``_sum`` or ``_count`` are
cumulative counters: a level's value is their change over the level, not their mean.
"""

from __future__ import annotations

from typing import Final

# --- gpu (NVML), labels {"gpu": "<index>"} ---
GPU_MEMORY_USED_BYTES: Final = "gpu.memory_used_bytes"
GPU_MEMORY_TOTAL_BYTES: Final = "gpu.memory_total_bytes"
GPU_MEMORY_USED_FRAC: Final = "gpu.memory_used_frac"  # 0..1
GPU_SM_UTIL_PCT: Final = "gpu.sm_util_pct"  # NVML "gpu" utilisation: share of time a kernel ran
GPU_MEM_UTIL_PCT: Final = "gpu.mem_util_pct"  # share of time device memory was read or written
GPU_POWER_W: Final = "gpu.power_w"
GPU_POWER_LIMIT_W: Final = "gpu.power_limit_w"  # the enforced limit
GPU_SM_CLOCK_MHZ: Final = "gpu.sm_clock_mhz"
GPU_SM_CLOCK_MAX_MHZ: Final = "gpu.sm_clock_max_mhz"
GPU_TEMPERATURE_C: Final = "gpu.temperature_c"
GPU_THROTTLE_MASK: Final = "gpu.throttle_mask"  # NVML clocks-event bitmask, as a float
GPU_THROTTLE_PREFIX: Final = "gpu.throttle."  # + reason name, value 1.0 while active else 0.0
# reason names (see telemetry.gpu.THROTTLE_REASONS) that mean the board is holding its power limit
POWER_THROTTLE_REASONS: Final = ("sw_power_cap", "hw_power_brake_slowdown")
THERMAL_THROTTLE_REASONS: Final = ("sw_thermal_slowdown", "hw_thermal_slowdown")

# --- host (/proc), per-core labels {"cpu": "<n>"}; {"cpu": "all"} is the whole machine ---
HOST_CPU_USER_PCT: Final = "host.cpu_user_pct"
HOST_CPU_SYSTEM_PCT: Final = "host.cpu_system_pct"
HOST_CPU_BUSY_PCT: Final = "host.cpu_busy_pct"  # everything but idle and iowait
# the load generator's processes, labels {"pid": "<pid>", "role": "main" | "worker"}; 100 = one core
HOST_PROC_CPU_PCT: Final = "host.proc_cpu_pct"
HOST_TCP_ESTABLISHED: Final = "host.tcp_established"  # labels {"target": "<host>:<port>"}
HOST_TCP_RETRANSMITS: Final = "host.tcp_retransmits"  # segments retransmitted since the last sample
HOST_TCP_OUT_SEGMENTS: Final = "host.tcp_out_segments"  # segments sent since the last sample

# --- client self-check, labels {"pid": "<pid>"} ---
CLIENT_LOOP_LAG_MS: Final = "client.loop_lag_ms"  # one sample per probe: how late a timed sleep woke

# --- server /metrics, normalised across engines ---
SERVER_REQUESTS_RUNNING: Final = "server.requests_running"
SERVER_REQUESTS_WAITING: Final = "server.requests_waiting"
SERVER_KV_USAGE: Final = "server.kv_usage"  # fraction 0..1
SERVER_PREEMPTIONS_TOTAL: Final = "server.preemptions_total"
SERVER_PROMPT_TOKENS_TOTAL: Final = "server.prompt_tokens_total"
SERVER_GENERATION_TOKENS_TOTAL: Final = "server.generation_tokens_total"
SERVER_BUSY_SLOTS_PER_DECODE: Final = "server.busy_slots_per_decode"  # llama.cpp's batch-size gauge
# histogram sums (seconds) and counts: a level's mean is delta(sum) / delta(count)
SERVER_TTFT_SUM: Final = "server.ttft_sum"
SERVER_TTFT_COUNT: Final = "server.ttft_count"
SERVER_ITL_SUM: Final = "server.itl_sum"
SERVER_ITL_COUNT: Final = "server.itl_count"
SERVER_TPOT_SUM: Final = "server.tpot_sum"  # per-request mean time per token (TGI)
SERVER_TPOT_COUNT: Final = "server.tpot_count"
SERVER_E2E_SUM: Final = "server.e2e_sum"
SERVER_E2E_COUNT: Final = "server.e2e_count"
SERVER_QUEUE_TIME_SUM: Final = "server.queue_time_sum"
SERVER_QUEUE_TIME_COUNT: Final = "server.queue_time_count"

CUMULATIVE_SUFFIXES: Final = ("_total", "_sum", "_count")


def is_cumulative(name: str) -> bool:
    """True for counters, whose per-level meaning is their change over the level."""
    return name.endswith(CUMULATIVE_SUFFIXES)
