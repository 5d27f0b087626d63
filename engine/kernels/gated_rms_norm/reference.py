"""The DeltaNet output norm: a plain-weight RMSNorm followed by a SiLU gate."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`(weight * norm(x)) * silu(gate)`; the normalised value is rounded to x.dtype before the weight multiply,
    which is where transformers rounds it (matters only for bf16)."""
    dtype = x.dtype
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)
    return ((weight * normed) * F.silu(gate.float())).to(dtype)
