"""Every `AW_*` switch of the engine, in one place, read when it is used (never at import), with one parser.

| variable | values | default | what it does |
| --- | --- | --- | --- |
| `AW_KERNELS` | `torch`, `triton` | unset | force the plain-torch references or the Triton kernels for every op |
| `TRITON_INTERPRET` | `1` | unset | Triton's own switch: run kernels on CPU tensors through its interpreter (tests) |
| `AW_CUDA_GRAPHS` | boolean | on | capture decode steps as CUDA graphs (GPU only) |
| `AW_OVERLAP_SCHEDULE` | boolean | on a GPU | settle a step's tokens while the device runs the next step (engine/llm_engine.py) |
| `AW_COMPILE` | boolean | off | CPU decode through `torch.compile`d regions (`LLM(compile_decode=)` wins) |
| `AW_CPU_GEMV` | boolean | on | GGUF weights on a CPU: multiply up to 16 tokens by the compiled C kernel (`engine/kernels/quant_matmul/cpu.py`) instead of dequantize + BLAS |
| `AW_GDN_DOT_PRECISION` | `tf32`, `ieee` | `tf32` | dot precision of the chunked delta rule's fp32 products (read when its module loads: a kernel constant) |

Booleans accept 1/0, true/false, on/off, yes/no (any case); anything else is an error naming the variable.
"""

from __future__ import annotations

import os

_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


def flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{name} must be one of {_TRUE + _FALSE}, got {raw!r}")


def choice(name: str, allowed: tuple[str, ...], default: str | None) -> str | None:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {raw!r}")
    return raw


def forced_kernels() -> str | None:
    return choice("AW_KERNELS", ("torch", "triton"), None)


def triton_interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def cuda_graphs() -> bool:
    return flag("AW_CUDA_GRAPHS", True)


def overlap_schedule(on_gpu: bool) -> bool:
    return flag("AW_OVERLAP_SCHEDULE", on_gpu)


def compile_decode() -> bool:
    return flag("AW_COMPILE", False)


def cpu_gemv() -> bool:
    return flag("AW_CPU_GEMV", True)


def gdn_dot_precision() -> str:
    return choice("AW_GDN_DOT_PRECISION", ("tf32", "ieee", "tf32x3"), "tf32") or "tf32"
