"""The two RMSNorms of the model: zero-centred `(1 + w)` for layer/q/k norms, plain `w` + SiLU gate in DeltaNet."""

from __future__ import annotations

import torch
from torch import nn

from engine.kernels import gated_rms_norm, rms_norm


class RMSNorm(nn.Module):
    """Zero-centred: the stored weight is an offset from 1 (initialised to 0)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return rms_norm(x, self.weight, self.eps, residual=residual)


class GatedRMSNorm(nn.Module):
    """Plain weight (initialised to 1), output multiplied by silu(gate)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(
        self, x: torch.Tensor, gate: torch.Tensor, out_rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        return gated_rms_norm(x, gate, self.weight, self.eps, out_rows)
