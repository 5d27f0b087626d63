#!/usr/bin/env bash
# One call on a lent H200: kernel correctness (bf16, real sizes), kernel times against their floors, and the
# whole 35B-A3B model with random weights (decode b1 at 2k/30k, b32, 8k prefill; CUDA graphs off/on).
# Fits in about 8 minutes. Log and table land in $OUT when the device tool sets it.
#   bench/gpu_check.sh              # on the GPU
#   bench/gpu_check.sh --dry-run    # on a CPU: tiny shapes through the Triton interpreter
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && ! command -v nvidia-smi >/dev/null && PY=.venv/bin/python
LOG="${OUT:-/tmp}/gpu_check.log"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv | tee "$LOG"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 510 "$PY" bench/gpu_check.py "$@" 2>&1 | tee -a "$LOG"
# Forks on one engine (issue 24): prefix-cache reuse and batching of 16 envs, tiny model; skipped on a dry run.
if [[ " $* " != *" --dry-run "* ]] && command -v nvidia-smi >/dev/null; then
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 45 "$PY" bench/env_fork_engine.py --device cuda \
    --max-tokens 64 --calls 4 2>&1 | tail -16 | tee -a "$LOG" || echo "env_fork_engine: did not finish" | tee -a "$LOG"
fi
