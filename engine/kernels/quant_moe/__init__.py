"""Routed SwiGLU experts with GGUF block-quantized expert weights: Triton on a GPU; on a CPU the reference's loop
over hit experts, each projection through the compiled C kernel for decode-sized inputs
(`engine/kernels/quant_matmul/cpu.py`), else dequantized in chunks."""

from functools import partial

import torch

from engine import settings
from engine.kernels.dispatch import kernel
from engine.kernels.quant_matmul import cpu
from engine.kernels.quant_moe import reference


def _cpu_applies(x: torch.Tensor, *_: object) -> bool:
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and settings.cpu_gemv()
        and cpu.library() is not None
    )


quant_moe = kernel(
    "engine.kernels.quant_moe.triton",
    cpu_fast_path=(_cpu_applies, partial(reference.routed_experts, quant_matmul=cpu.quant_matmul)),
)(reference.quant_moe)

__all__ = ["quant_moe"]
