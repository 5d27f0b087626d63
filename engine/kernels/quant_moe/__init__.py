"""Routed SwiGLU experts with GGUF block-quantized expert weights: Triton on a GPU, the torch reference (hit
experts only, dequantized in chunks) on a CPU."""

from engine.kernels.dispatch import kernel
from engine.kernels.quant_moe import reference

quant_moe = kernel("engine.kernels.quant_moe.triton")(reference.quant_moe)

__all__ = ["quant_moe"]
