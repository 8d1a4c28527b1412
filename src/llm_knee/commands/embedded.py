"""The embedded default target: `knee find` with no --url starts serve-sim in a child process.

A fresh install can so run its main job with no GPU and no server. The profile is stated wherever the
result is shown: these are *simulated* numbers for that profile, not a measurement of any real server.
"""

from __future__ import annotations

import sys
from pathlib import Path

from llm_knee.engines.process import ServerProcess, free_port

PROFILE = {"model": "Llama-3.1-8B", "gpu": "H100-SXM", "dtype": "bf16", "tp": "1", "max_num_seqs": "256"}
PROFILE_TEXT = "Llama-3.1-8B, BF16, one H100-SXM, vLLM-like defaults (max_num_seqs 256, chunked prefill)"
# A short ladder around the simulated knee, and short levels: the whole demo takes about two minutes.
DEMO_LEVELS: tuple[float, ...] = (1, 8, 16, 32, 64, 128, 256)
DEMO_MAX_DURATION_S = 8.0
DEMO_MIN_DURATION_S = 3.0
DEMO_STABILITY_WINDOW_S = 1.0


def start_embedded_sim(log_dir: Path, startup_timeout_s: float = 60.0) -> tuple[ServerProcess, str]:
    port = free_port()
    argv = [
        sys.executable, "-m", "llm_knee", "serve-sim", "--port", str(port), "--model", PROFILE["model"],
        "--gpu", PROFILE["gpu"], "--dtype", PROFILE["dtype"], "--tp", PROFILE["tp"],
        "--max-num-seqs", PROFILE["max_num_seqs"],
    ]  # fmt: skip
    log_dir.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{port}"
    proc = ServerProcess(
        argv,
        health_url=base + "/health",
        log_path=log_dir / f"serve-sim-{port}.log",
        startup_timeout_s=startup_timeout_s,
        new_session=True,  # the child must not get the terminal's Ctrl-C: we stop it ourselves, after the run
    )
    proc.start()
    return proc, base
