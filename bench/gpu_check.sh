#!/usr/bin/env bash
# One call on a lent GPU that answers everything (bench/gpu_check.py: the parts, their budgets, the rows):
# at most 8 minutes of a 10-minute device command, each part in its own process and time budget. The log, the
# rows as JSONL and the table land in $OUT (default /tmp/gpu_check) as they are measured.
#   bench/gpu_check.sh               # on the GPU
#   bench/gpu_check.sh --dry-run     # on a CPU: the same parts, tiny shapes, the Triton interpreter
#   bench/gpu_check.sh --only smoke bf16_decode
# On a lent device: run bench/gpu_wheels.sh here first, then `run` it with carry [".whl"].
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && ! command -v nvidia-smi >/dev/null && PY=.venv/bin/python
export OUT="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: >"$LOG"
# Wheels carried in .whl/ (written here by bench/gpu_wheels.sh: xgrammar, gguf, mcp 2.x and the rest of what the
# code run below imports and the device image lacks; a device `run` names .whl in `carry`).
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site \
    .whl/*.whl 2>&1 | tail -3 | tee -a "$LOG" && export PYTHONPATH="/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}"
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv | tee -a "$LOG"
# The parts' own budgets total 480 s on a GPU; this outer limit only guards the parent (it prints the table on
# TERM). A dry run's parts go through the interpreter on a CPU: their budgets are the dry ones, summed.
LIMIT=560
[[ " $* " == *" --dry-run "* ]] && LIMIT=3600
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 timeout -k 10 "$LIMIT" "$PY" bench/gpu_check.py "$@" 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
