"""Linears that read the same input, fused into one weight: one GEMM (and one kernel launch) instead of several.

The fused weight is a fresh tensor and each linear's weight becomes a view of its rows, so nothing is stored
twice and parameter names, the loader and in-place weight edits keep working."""

from __future__ import annotations

import torch
from torch import nn

from engine.quant.weight import QuantizedWeight, replace_parameter


def fuse_linear_weights(*linears: nn.Linear) -> torch.Tensor | QuantizedWeight:
    """[sum of out_features, in_features]; the rows of linear i follow those of linear i - 1. When any weight is
    kept in GGUF blocks the fused weight is a `QuantizedWeight` (row ranges per type) and each linear's weight a
    row slice of it, still stored once."""
    if any(linear.bias is not None for linear in linears):
        raise ValueError("only bias-free linears are fused")
    quantized = [w for w in (linear.weight for linear in linears) if isinstance(w, QuantizedWeight)]
    if quantized:
        fused_q = QuantizedWeight.concat([linear.weight for linear in linears], quantized[0].dtype)
        offset = 0
        for linear in linears:
            rows = linear.weight.shape[0]
            replace_parameter(linear, "weight", fused_q.row_slice(offset, offset + rows))
            offset += rows
        return fused_q
    fused = torch.cat([linear.weight.detach() for linear in linears])
    offset = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight = nn.Parameter(fused[offset : offset + rows], requires_grad=False)
        offset += rows
    return fused


def require_fused(
    fused: torch.Tensor | QuantizedWeight | None, module: nn.Module
) -> torch.Tensor | QuantizedWeight:
    """The fused weight, or a clear error: running unfused would silently cost one GEMM launch per projection."""
    if fused is None:
        raise RuntimeError(
            f"{type(module).__name__} runs on fused projection weights: call model.fuse_weights() after loading "
            "(engine.loader.build_model does)"
        )
    return fused
