"""The DeltaNet output norm: plain-weight RMSNorm times silu(gate)."""

from __future__ import annotations

import torch

from engine.kernels.dispatch import use_triton
from engine.kernels.gated_rms_norm import reference


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    impl = reference
    if use_triton(x, gate, weight):
        from engine.kernels.gated_rms_norm import triton as impl
    return impl.gated_rms_norm(x, gate, weight, eps)


__all__ = ["gated_rms_norm"]
