"""The DeltaNet output norm: a plain-weight RMSNorm followed by a SiLU gate."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`(weight * norm(x)) * silu(gate)`; the normalised value is rounded to x.dtype before the weight multiply,
    which is where transformers rounds it (matters only for bf16)."""
    dtype = x.dtype
    xf = x.float()
    normed = F.rms_norm(xf, (xf.shape[-1],), eps=eps).to(dtype)  # xf * rsqrt(mean(xf^2) + eps), one op
    return ((weight * normed) * F.silu(gate.float())).to(dtype)
