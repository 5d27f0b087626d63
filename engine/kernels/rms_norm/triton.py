"""Zero-centred RMSNorm in Triton, optionally fused with the residual add that precedes it.

One program per row: the row (hidden 2048) fits in registers, so x is read once and y (and h) written once.
Every load is upcast to fp32 at once: the Triton interpreter computes bf16 arithmetic on bit patterns.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    n_cols,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # The residual stream lives in x.dtype, so the sum is rounded to it before the norm (as in torch).
        h = (
            x.to(tl.float32) + tl.load(res_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        ).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * n_cols + cols, h, mask=mask)
        xf = h.to(tl.float32)
    else:
        xf = x.to(tl.float32)
    inv_rms = tl.math.rsqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (xf * inv_rms * (1.0 + w)).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `reference.rms_norm`: y, or (y, x + residual) when `residual` is given."""
    shape = x.shape
    n_cols = shape[-1]
    x2 = x.reshape(-1, n_cols).contiguous()
    y = torch.empty_like(x2)
    if residual is not None:
        res2 = residual.reshape(-1, n_cols).to(x.dtype).contiguous()
        h = torch.empty_like(x2)
    else:
        res2, h = x2, y  # unused by the kernel when HAS_RESIDUAL is False
    if x2.shape[0]:
        block = triton.next_power_of_2(n_cols)
        _rms_norm_kernel[(x2.shape[0],)](
            x2, res2, weight.contiguous(), y, h, n_cols, eps,
            HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=min(max(block // 256, 1), 8),
        )  # fmt: skip
    if residual is None:
        return y.view(shape)
    return y.view(shape), h.view(shape)
