"""Zero-centred (Gemma-style) RMSNorm: the weight is stored as an offset from 1."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`x * rsqrt(mean(x^2) + eps) * (1 + weight)` in fp32, cast back to x.dtype.

    With `residual`, first `h = x + residual` (in x.dtype, as the model's residual stream is) and return
    `(rms_norm(h), h)`: the fused add + norm of a pre-norm decoder layer.
    """
    hidden = x if residual is None else x + residual
    # torch's fused rms_norm computes exactly xf * rsqrt(mean(xf^2) + eps) * w, in a single op.
    out = F.rms_norm(hidden.float(), (hidden.shape[-1],), 1.0 + weight.float(), eps).to(x.dtype)
    return out if residual is None else (out, hidden)
