"""The CPU fast path of `quant_matmul` for a few tokens (decode): `cpu_gemv.c`, built on first use with the
machine's C compiler and loaded through ctypes (which releases the GIL during the call).

Why C: the torch reference dequantizes every weight a step touches into a float buffer and hands it to BLAS, about
15 whole-tensor passes per chunk: 4-8x the time of an F32 GEMV on the same shape. The C kernel decodes each block
into an L1-resident buffer and multiplies it by every token at once, so a weight is read once, as stored, and
never written back. No compiler, a failed build or `AW_CPU_GEMV=0`: the torch reference runs (one warning).

The library is cached by a hash of the source, the flags and the CPU's feature flags (it is built with
`-march=native`) under `$AW_CACHE_DIR` or `~/.cache/agentworld-mcp/`; a build takes about a second."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch

from engine import settings
from engine.kernels.quant_matmul import reference
from engine.quant.formats import FORMATS, QUANTIZED_TYPES, GGMLType

MAX_TOKENS = 16  # the C kernel's accumulators; more tokens amortise the dequantization: BLAS wins there
SOURCE = Path(__file__).with_name("cpu_gemv.c")
FLAGS = ["-O3", "-march=native", "-shared", "-fPIC", "-pthread"]
_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_tried = False


def _cpu_features() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return os.uname().machine


def _build() -> ctypes.CDLL:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or $CC)")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join(FLAGS).encode() + _cpu_features().encode()).hexdigest()[:16]
    cache = Path(os.environ.get("AW_CACHE_DIR") or Path.home() / ".cache" / "agentworld-mcp") / "kernels"
    target = cache / f"cpu_gemv-{key}.so"
    if not target.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            built = Path(tmp) / target.name
            result = subprocess.run(
                [compiler, *FLAGS, "-o", str(built), str(SOURCE)], capture_output=True, text=True
            )
            if result.returncode != 0:
                raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[:300]}")
            os.replace(built, target)  # atomic: concurrent builders each write their own temp file
    library = ctypes.CDLL(str(target))
    library.aw_quant_gemv.restype = ctypes.c_int
    library.aw_quant_gemv.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
    ]  # fmt: skip
    library.aw_dequantize.restype = ctypes.c_int
    library.aw_dequantize.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    return library


def library() -> ctypes.CDLL | None:
    """The built kernel, or None (after one warning) when it cannot be built here."""
    global _library, _tried
    if not _tried:
        with _lock:
            if not _tried:
                try:
                    _library = _build()
                except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                    warnings.warn(
                        f"the CPU GGUF kernel could not be built ({exc}); GGUF weights on the CPU use the slower "
                        "torch path",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                _tried = True
    return _library


def applies(x: torch.Tensor, blocks: torch.Tensor, kind: int, cols: int) -> bool:
    """fp32 decode-sized inputs on a CPU, a quantized kind, rows whose bytes are contiguous, and the kernel built."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.dim() == 2
        and 1 <= x.shape[0] <= MAX_TOKENS
        and blocks.dtype == torch.uint8
        and blocks.dim() == 2
        and blocks.stride(-1) == 1
        and GGMLType(kind) in QUANTIZED_TYPES
        and settings.cpu_gemv()
        and library() is not None
    )


def quant_matmul(x: torch.Tensor, blocks: torch.Tensor, kind: int, cols: int) -> torch.Tensor:
    """`reference.quant_matmul`'s contract; the C kernel where `applies`, else the reference."""
    if not applies(x, blocks, kind, cols):
        return reference.quant_matmul(x, blocks, kind, cols)
    x = x.contiguous()
    rows = blocks.shape[0]
    out = torch.empty(x.shape[0], rows, dtype=torch.float32)
    status = library().aw_quant_gemv(  # type: ignore[union-attr]
        int(kind), blocks.data_ptr(), rows, cols, blocks.stride(0), x.data_ptr(), x.shape[0], out.data_ptr(),
        torch.get_num_threads(),
    )  # fmt: skip
    if status != 0:
        raise ValueError(
            f"the CPU GGUF kernel refused kind {kind} with {cols} columns and {x.shape[0]} tokens"
        )
    return out


def dequantize(blocks: torch.Tensor, kind: int, cols: int) -> torch.Tensor:
    """The C kernel's own decoding of whole blocks, fp32 (for tests against the torch reference)."""
    lib = library()
    if lib is None:
        raise RuntimeError("the CPU GGUF kernel is not built")
    blocks = blocks.contiguous()
    rows = blocks.numel() // blocks.shape[-1]
    out = torch.empty(*blocks.shape[:-1], cols, dtype=torch.float32)
    nblocks = rows * cols // FORMATS[GGMLType(kind)].block_size
    if lib.aw_dequantize(int(kind), blocks.data_ptr(), nblocks, out.data_ptr()) != 0:
        raise ValueError(f"the CPU GGUF kernel does not know kind {kind}")
    return out
