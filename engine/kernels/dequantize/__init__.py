"""GGUF block-quantized weights to floats. On a GPU (and under the interpreter) one Triton launch whose per-type
decoder is the one the quantized matmul and MoE kernels run; the torch reference's ~15 ops per type are the CPU
path, and what the tests hold the kernel to."""

from engine.kernels.dequantize import reference
from engine.kernels.dispatch import kernel

dequantize = kernel("engine.kernels.dequantize.triton")(reference.dequantize)

__all__ = ["dequantize"]
