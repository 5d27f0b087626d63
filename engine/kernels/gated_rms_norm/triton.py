"""The DeltaNet output norm in Triton: `(weight * rms_normalise(x)) * silu(gate)`, one program per row (head).

The normalised value is rounded to x.dtype before the weight multiply, and the weight product to the promoted
dtype of (weight, x), exactly where the torch reference (and transformers) round, so bf16 results agree bit for
bit in the common case.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _gated_rms_norm_kernel(
    x_ptr,
    gate_ptr,
    w_ptr,
    y_ptr,
    n_cols,
    eps,
    PRODUCT_DTYPE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    xf = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.math.rsqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    normed = (xf * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    weighted = (w * normed).to(PRODUCT_DTYPE).to(tl.float32)
    gate = tl.load(gate_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    y = weighted * gate * tl.sigmoid(gate)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


_TL_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x, gate [..., D]; weight [D] -> y [..., D] in x.dtype."""
    shape = x.shape
    n_cols = shape[-1]
    x2 = x.reshape(-1, n_cols).contiguous()
    gate2 = gate.reshape(-1, n_cols).contiguous()
    y = torch.empty_like(x2)
    if x2.shape[0]:
        block = triton.next_power_of_2(n_cols)
        _gated_rms_norm_kernel[(x2.shape[0],)](
            x2, gate2, weight.contiguous(), y, n_cols, eps,
            PRODUCT_DTYPE=_TL_DTYPES[torch.promote_types(weight.dtype, x.dtype)], BLOCK=block,
            num_warps=min(max(block // 256, 1), 8),
        )  # fmt: skip
    return y.view(shape)
