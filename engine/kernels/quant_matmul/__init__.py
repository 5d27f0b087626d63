"""`x @ W.T` with W in GGUF blocks: Triton (dequantized in the K loop) on a GPU, chunked dequantize + matmul on a
CPU."""

from engine.kernels.dispatch import kernel
from engine.kernels.quant_matmul import reference

quant_matmul = kernel("engine.kernels.quant_matmul.triton")(reference.quant_matmul)

__all__ = ["quant_matmul"]
