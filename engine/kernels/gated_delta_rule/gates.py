"""Gated DeltaNet's gates from its projections: run in torch by prefill, fused into the decode kernel on a GPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def deltanet_gates(
    a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """beta = sigmoid(b) in the model dtype (as the reference model does), log-decay
    g = -exp(A_log) * softplus(a + dt_bias) in fp32."""
    return torch.sigmoid(b), -A_log.float().exp() * F.softplus(a.float() + dt_bias)
