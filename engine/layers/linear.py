"""`linear(x, w)` = `x @ w.T`, computed in the orientation the CPU's BLAS runs fastest for a few rows.

With 2 to 128 rows (decode batches), MKL multiplies `w @ x.T` (the weight as the untransposed left operand) 1.2 to
2.4x faster than `x @ w.T` on a CPU, and splits it across threads better: measured on the 2-core CI box for the
decode projections and a 32k-row vocabulary matrix (bench/engine_cpu.py). One row and prefill-sized inputs
keep `F.linear`, which is as fast or faster there. GPUs always take `F.linear` (cuBLAS picks its own kernels).
GGUF weights kept quantized (`engine/quant/weight.py`) take their own kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.quant.weight import QuantizedWeight

TRANSPOSED_MAX_ROWS = 128


def linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight) -> torch.Tensor:
    """x [T, in] (or [in]), weight [out, in] -> [T, out]; the result may be a transposed view. A GGUF weight kept
    in its blocks multiplies through `quant_matmul`."""
    if isinstance(weight, QuantizedWeight):
        return weight.matmul(x)
    if x.device.type == "cpu" and x.dim() == 2 and 2 <= x.shape[0] <= TRANSPOSED_MAX_ROWS:
        return (weight @ x.t()).t()
    return F.linear(x, weight)
