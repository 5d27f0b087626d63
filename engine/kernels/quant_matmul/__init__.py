"""`x @ W.T` with W in GGUF blocks: Triton (dequantized in the K loop) on a GPU; on a CPU the compiled C kernel for
up to 16 tokens (`cpu.py`), else chunked dequantize + matmul (the reference)."""

from functools import partial

from engine.kernels.dispatch import kernel
from engine.kernels.quant_matmul import cpu, reference

quant_matmul = kernel("engine.kernels.quant_matmul.triton", cpu_fast_path=(cpu.applies, cpu.quant_matmul))(
    reference.quant_matmul
)

# A weight of several types: on a GPU one GEMV launch for two parts at decode sizes (no cat); elsewhere each part
# through `quant_matmul` (so the C kernel serves them on a CPU).
quant_matmul_parts = kernel(
    "engine.kernels.quant_matmul.triton",
    cpu_fast_path=(lambda *_: True, partial(reference.quant_matmul_parts, matmul=quant_matmul)),
)(reference.quant_matmul_parts)

__all__ = ["quant_matmul", "quant_matmul_parts"]
