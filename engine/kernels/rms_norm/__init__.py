"""Zero-centred RMSNorm, optionally fused with the residual add."""

from __future__ import annotations

import torch

from engine.kernels.dispatch import use_triton
from engine.kernels.rms_norm import reference


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    impl = reference
    if use_triton(x, weight):
        from engine.kernels.rms_norm import triton as impl
    return impl.rms_norm(x, weight, eps, residual=residual)


__all__ = ["rms_norm"]
