"""The DeltaNet output norm: a plain-weight RMSNorm followed by a SiLU gate."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_rms_norm(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """`(weight * norm(x)) * silu(gate)`; the normalised value is rounded to x.dtype before the weight multiply,
    which is where transformers rounds it (matters only for bf16).

    `out_rows` [x.shape[-2]] (int64): row i of each [..., rows, D] slice is written at row `out_rows[i]` (a
    permutation: the order the next projection stores its input columns in, see `QuantizedWeight.input_groups`)."""
    dtype = x.dtype
    xf = x.float()
    normed = F.rms_norm(xf, (xf.shape[-1],), eps=eps).to(dtype)  # xf * rsqrt(mean(xf^2) + eps), one op
    y = ((weight * normed) * F.silu(gate.float())).to(dtype)
    return y if out_rows is None else torch.empty_like(y).index_copy_(-2, out_rows, y)
