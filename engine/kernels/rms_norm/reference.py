"""Zero-centred (Gemma-style) RMSNorm: the weight is stored as an offset from 1."""

from __future__ import annotations

import torch


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`x * rsqrt(mean(x^2) + eps) * (1 + weight)` in fp32, cast back to x.dtype.

    With `residual`, first `h = x + residual` (in x.dtype, as the model's residual stream is) and return
    `(rms_norm(h), h)`: the fused add + norm of a pre-norm decoder layer.
    """
    hidden = x if residual is None else x + residual
    xf = hidden.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())
    out = out.to(x.dtype)
    return out if residual is None else (out, hidden)
