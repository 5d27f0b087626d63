#!/usr/bin/env bash
# The wheels bench/gpu_check.sh installs on a lent device before it runs: what the engine's structured rows
# (xgrammar), the GGUF rows (gguf) and the env-fork row (aw_mcp: mcp 2.x, pydantic-settings, jsonschema, re2, ...)
# import and the device image lacks (its package list: the device README's KINDS.md). The device has no network, so
# they travel in .whl/ (ignored by git; name it in the run's `carry`). Run here, where PyPI answers:
#   bench/gpu_wheels.sh            # writes .whl/ for the device's Python (3.12, manylinux x86_64)
# gpu_check.sh then installs .whl/*.whl with --no-deps into a target of its own, ahead of the image's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
PYVER="${DEVICE_PYTHON:-3.12}"
LIMIT_MB=48  # a run carries at most 64 MiB of working tree in all

# What the code run by gpu_check imports, at the versions this tree is tested with.
version() { "$PY" -m pip show "$1" 2>/dev/null | awk '/^Version:/{print $2}'; }
wanted=()
for name in xgrammar gguf mcp pydantic-settings jsonschema referencing google-re2 sse-starlette uvicorn anyio; do
  v="$(version "$name")"
  wanted+=("$name${v:+==$v}")
done

# Already on the device image (KINDS.md, 2026-11-17), so not carried; torch, triton and the CUDA libraries above all.
device_has=" absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc attrs certifi
charset-normalizer click cloudpickle filelock frozenlist fsspec h11 hf-xet httpcore httpx huggingface-hub idna
jinja2 markdown-it-py markupsafe mdurl mpmath networkx numpy packaging prometheus-client protobuf psutil pygments
pyyaml regex requests rich safetensors sentencepiece shellingham six sympy tokenizers torch tqdm transformers
triton typer typing-extensions urllib3"
device_has=" $(echo $device_has) "  # one space between names, and around them

all="$(mktemp -d)"
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
"$PY" -m pip download --quiet --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 "${platforms[@]}" -d "$all" "${wanted[@]}"

rm -rf .whl && mkdir .whl
for wheel in "$all"/*.whl; do
  base="$(basename "$wheel")"
  name="$(echo "${base%%-*}" | tr '[:upper:]' '[:lower:]' | tr '_' '-')"
  case "$name" in nvidia-*|cuda-*) continue ;; esac
  [[ "$device_has" == *" $name "* ]] && continue
  cp "$wheel" .whl/
done
rm -rf "$all"
ls -1 .whl
size_mb=$(( $(du -sk .whl | cut -f1) / 1024 ))
echo "$(ls .whl | wc -l) wheels, ${size_mb} MiB in .whl/ (for Python $PYVER)"
if (( size_mb > LIMIT_MB )); then
  echo "error: .whl/ is ${size_mb} MiB, over the ${LIMIT_MB} MiB left for it in a device run's carry" >&2
  exit 1
fi
