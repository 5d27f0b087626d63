"""Instructions and shuffles per weight in the decode GEMV's K loop, read from the compiled code (no GPU needed).

For each GGUF type and token count, `quant_matmul` is called on meta tensors at a real shape (2048 x 2048) inside
the ahead-of-time capture (`engine/kernels/aot/capture.py`: the launch is recorded, bound for the card, not run);
the recorded kernel is compiled for `GPUTarget("cuda", arch, 32)` and disassembled with the triton wheel's
cuobjdump. The K loop is the longest backward branch of the SASS; its instructions (NOPs left out) and SHFLs are
divided by the weights one thread handles per trip, so "instr/weight" is what each weight costs a thread, whatever
the tokens (divide by T for the cost per weight and token).

    .venv/bin/python bench/gemv_sass.py [--arch 90 89] [--tokens 1 4 16] [--types Q4_K ...]   # ~10 minutes
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from engine.kernels.aot.capture import spec_of  # noqa: E402
from engine.quant.formats import GGMLType, row_bytes  # noqa: E402

KINDS = [GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.IQ4_XS, GGMLType.MXFP4]
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)")


def recorded_launches(arch: int, tokens: int, kind: GGMLType, rows: int, cols: int) -> list:
    """(spec, bound args) of every Triton launch `quant_matmul` makes for this shape, on meta tensors."""
    from engine.kernels.arch import target_arch
    from engine.kernels.quant_matmul import triton as quant_triton

    launches = []
    launch = JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):  # noqa: ARG001
        launches.append(spec_of(self, arch, args, kwargs))

    x = torch.empty(tokens, cols, dtype=torch.bfloat16, device="meta")
    blocks = torch.empty(rows, row_bytes(kind, cols), dtype=torch.uint8, device="meta")
    JITFunction.run = record  # type: ignore[method-assign]
    try:
        with target_arch(arch):
            quant_triton.quant_matmul(x, blocks, int(kind), cols)
    finally:
        JITFunction.run = launch  # type: ignore[method-assign]
    return launches


def sass(spec) -> tuple[str, str]:
    """(SASS, resource usage) of the spec compiled for its arch."""
    import importlib

    fn = getattr(importlib.import_module(spec.module), spec.name)
    attrs = {path: [list(a) for a in values] for path, values in spec.attrs}
    source = ASTSource(fn, dict(spec.signature), dict(spec.constexprs), attrs)
    kernel = triton.compile(source, target=GPUTarget("cuda", spec.arch, 32), options=dict(spec.options))
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        text = subprocess.run([CUOBJDUMP, "-sass", cubin], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([CUOBJDUMP, "-res-usage", cubin], capture_output=True, text=True).stdout
    return text, usage


def k_loop(text: str) -> list[str]:
    """The instructions of the longest backward branch's span (NOPs left out)."""
    instructions = [(int(a, 16), body) for a, body in _INSTRUCTION.findall(text)]
    best: tuple[int, int] | None = None
    for address, body in instructions:
        target = _BRANCH.search(body)
        if target and int(target.group(1), 16) < address:
            span = (int(target.group(1), 16), address)
            if best is None or span[1] - span[0] > best[1] - best[0]:
                best = span
    if best is None:
        return []
    return [b for a, b in instructions if best[0] <= a <= best[1] and not b.split()[-1].startswith("NOP")]


def weights_per_thread_trip(spec) -> float:
    """Weights one thread decodes per trip of the K loop. The packed GEMV (constexprs R, NT, L, KS): R * NT rows
    of 256 * KS columns per trip; the byte-wise GEMV it replaced (BLOCK_N, SUBS): BLOCK_N rows of one block."""
    c = spec.constants()
    threads = 32 * spec.option("num_warps")
    if "KS" in c:
        return c["R"] * c["NT"] * 256 * c["KS"] / threads
    return c["BLOCK_N"] * 32 * c["SUBS"] / threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, nargs="+", default=[90, 89])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--types", nargs="+", default=[k.name for k in KINDS], choices=[k.name for k in KINDS]
    )
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=2048)
    args = parser.parse_args()
    print(f"decode GEMV [{args.rows} x {args.cols}], bf16 x; triton {triton.__version__}")
    print("| type | T | arch | kernel | regs | stack B | K-loop instr | SHFL | instr/weight | SHFL/weight |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in (GGMLType[name] for name in args.types):
        for tokens in args.tokens:
            for arch in args.arch:
                for spec, _ in recorded_launches(arch, tokens, kind, args.rows, args.cols):
                    text, usage = sass(spec)
                    loop = k_loop(text)
                    shuffles = sum("SHFL" in body for body in loop)
                    per_trip = weights_per_thread_trip(spec)
                    regs = re.search(r"REG:(\d+)", usage)
                    stack = re.search(r"STACK:(\d+)", usage)
                    print(
                        f"| {kind.name} | {tokens} | sm_{arch} | {spec.name} | {regs.group(1) if regs else '?'} | "
                        f"{stack.group(1) if stack else '?'} | {len(loop)} | {shuffles} | "
                        f"{len(loop) / per_trip:.2f} | {shuffles / per_trip:.2f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
