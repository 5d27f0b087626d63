"""`x @ W.T` with W in GGUF blocks: Triton (dequantized in the K loop) on a GPU; on a CPU the compiled C kernel for
up to 16 tokens (`cpu.py`), else chunked dequantize + matmul (the reference)."""

from engine.kernels.dispatch import kernel
from engine.kernels.quant_matmul import cpu, reference

quant_matmul = kernel("engine.kernels.quant_matmul.triton", cpu_fast_path=(cpu.applies, cpu.quant_matmul))(
    reference.quant_matmul
)

__all__ = ["quant_matmul"]
