"""Compile one recorded kernel for its card and read what the card will see: shared memory, registers, spills and
the global loads of the PTX by width.

`triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))` runs the whole pipeline down to the cubin
without a driver. Registers and spills come from `ptxas -v`, which Triton runs and whose log it throws away: the
log is read on the way (`_PtxasLog`), or, when Triton's own cache answered and ptxas did not run, ptxas (from the
triton wheel) is run again on the PTX. Results are cached as JSON (`cache_key`: the triton version, the
kernel's source and its callees', the specialization, the options and the target), so an unchanged kernel is
never compiled twice.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import compiler as nvidia_compiler
from triton.compiler import ASTSource

from engine.kernels.aot.capture import KernelSpec

_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
# ld.global[.qualifiers][.v2|.v4].<type><bits>, e.g. `@%p1 ld.global.L1::evict_last.v4.b32 { ... }, [ %rd1 ];`
_GLOBAL_LOAD = re.compile(r"\bld\.global((?:\.[\w:]+)*?)(\.v[248])?\.[bsuf](8|16|32|64)\b")
LOAD_WIDTHS = ("b8", "b16", "b32", "b64", "v2", "v4")


@dataclass
class KernelStats:
    """What compiling one KernelSpec gave (error set when it did not compile)."""

    shared: int = 0
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    loads: dict[str, int] = field(default_factory=dict)
    error: str = ""

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def count_global_loads(ptx: str) -> dict[str, int]:
    """Global load instructions in the PTX by width: scalar b8/b16/b32/b64 (whatever the type letter), and
    vector v2/v4 (any element width)."""
    counts = dict.fromkeys(LOAD_WIDTHS, 0)
    for match in _GLOBAL_LOAD.finditer(ptx):
        vector = match.group(2)
        counts[vector[1:] if vector else f"b{match.group(3)}"] += 1
    return counts


def parse_ptxas_log(log: str) -> tuple[int, int, int, int]:
    """(registers, stack frame, spill store, spill load bytes) of the one kernel in a `ptxas -v` log."""
    registers = _REGISTERS.search(log)
    spills = _SPILLS.search(log)
    if registers is None or spills is None:
        raise ValueError(f"unexpected ptxas -v output: {log[:400]!r}")
    stack, stores, loads = (int(g) for g in spills.groups())
    return int(registers.group(1)), stack, stores, loads


class _PtxasLog:
    """Stands in for `subprocess` inside Triton's NVIDIA compiler: runs everything as it would, and keeps the
    log of each ptxas run (Triton passes it a log file as stderr and deletes it afterwards)."""

    def __init__(self) -> None:
        self.logs: list[str] = []

    def run(self, cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess:
        result = subprocess.run(cmd, *args, **kwargs)
        log = kwargs.get("stderr")
        if "ptxas" in os.path.basename(str(cmd[0])) and hasattr(log, "name"):
            self.logs.append(Path(log.name).read_text())
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


def _run_ptxas(ptx: str, arch: int) -> str:
    """ptxas -v on the PTX (when Triton's cache answered and no log was seen), as Triton runs it."""
    ptxas = nvidia_compiler.get_ptxas(arch).path
    gpu = nvidia_compiler.sm_arch_from_capability(arch)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        cmd = [ptxas, "-lineinfo", "-v", "--regAllocOptLevel=2", f"--gpu-name={gpu}", str(src)]
        done = subprocess.run([*cmd, "-o", str(src.with_suffix(".o"))], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ptxas failed: {done.stderr[-2000:]}")
    return done.stderr


def _source(spec: KernelSpec) -> ASTSource:
    fn = getattr(importlib.import_module(spec.module), spec.name)
    attrs = {path: [list(a) for a in values] for path, values in spec.attrs}
    return ASTSource(fn, dict(spec.signature), dict(spec.constexprs), attrs)


def cache_key(spec: KernelSpec) -> str:
    """What the stats of `spec` are a function of, as a digest that means the same on every machine: the triton
    version (which fixes its LLVM and its ptxas), the kernel's source with its callees', the specialization, the
    target and the options (less the path of libdevice, which is the wheel's own)."""
    options = [(k, v) for k, v in spec.options if k != "extern_libs"]
    parts = [triton.__version__, _source(spec).hash(), str(spec.arch), repr(options)]
    return hashlib.sha256("-".join(parts).encode()).hexdigest()


def compile_spec(spec: KernelSpec) -> KernelStats:
    """Compile `spec` for its arch and measure it; a compile error is returned (not raised)."""
    target = GPUTarget("cuda", spec.arch, 32)
    tap = _PtxasLog()
    nvidia_compiler.subprocess = tap  # type: ignore[assignment]
    try:
        kernel = triton.compile(_source(spec), target=target, options=dict(spec.options))
    except Exception as error:  # noqa: BLE001 - any compiler failure is a result to report
        return KernelStats(error=f"{type(error).__name__}: {str(error).strip()[:600]}")
    finally:
        nvidia_compiler.subprocess = subprocess  # type: ignore[assignment]
    ptx = kernel.asm["ptx"]
    log = tap.logs[-1] if tap.logs else _run_ptxas(ptx, spec.arch)
    registers, stack, stores, loads = parse_ptxas_log(log)
    return KernelStats(
        shared=int(kernel.metadata.shared),
        registers=registers,
        spill_stores=stores,
        spill_loads=loads,
        stack=stack,
        loads=count_global_loads(ptx),
    )
