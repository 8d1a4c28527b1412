#!/usr/bin/env bash
# Provides the llama.cpp `llama-server` binary the engine tests use: installs the build tools when they
# are missing, then finds or builds the binary (cached under ~/.cache/llm-knee/llama-server, so only the
# first run on a machine spends the 5-to-15-minute build). Prints the binary's path; exports nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || command -v make >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || command -v c++ >/dev/null || command -v clang++ >/dev/null || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  # Nothing is installed when a usable binary is already there (given, on PATH or cached).
  if ! "$PY" -m llm_knee.engines.llamacpp build --no-build >/dev/null 2>&1; then
    echo "[llama.sh] installing build tools: ${missing[*]}" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

"$PY" -m llm_knee.engines.llamacpp build --jobs "$(nproc 2>/dev/null || echo 2)"
