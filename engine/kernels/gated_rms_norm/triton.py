"""The DeltaNet output norm in Triton: `(weight * rms_normalise(x)) * silu(gate)`, one program per row (head).

The normalised value is rounded to x.dtype before the weight multiply, and the weight product to the promoted
dtype of (weight, x), exactly where the torch reference (and transformers) round, so bf16 results agree bit for
bit in the common case.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.strides import unit_stride_rows


@triton.jit
def _gated_rms_norm_kernel(
    x_ptr,
    gate_ptr,
    w_ptr,
    y_ptr,
    out_rows_ptr,
    n_cols,
    inner,
    stride_gate_outer,
    stride_gate_inner,
    eps,
    PRODUCT_DTYPE: tl.constexpr,
    HAS_OUT_ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    # Row = (outer, inner) of [outer, inner, D]: the gate is read through its strides (a view of the layer's fused
    # projection), and the output row may move inside its slice (`out_rows`: the next projection's input order).
    outer = row // inner
    head = row % inner
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    xf = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.math.rsqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    normed = (xf * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    weighted = (w * normed).to(PRODUCT_DTYPE).to(tl.float32)
    gate_row = gate_ptr + outer * stride_gate_outer + head * stride_gate_inner
    gate = tl.load(gate_row + cols, mask=mask, other=0.0).to(tl.float32)
    y = weighted * gate * tl.sigmoid(gate)
    out_row = row
    if HAS_OUT_ROWS:
        out_row = outer * inner + tl.load(out_rows_ptr + head)
    tl.store(y_ptr + out_row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


_TL_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def gated_rms_norm(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """x, gate [..., D]; weight [D] -> y [..., D] in x.dtype (as `reference.gated_rms_norm`)."""
    shape = x.shape
    n_cols = shape[-1]
    inner = shape[-2] if x.dim() > 1 else 1
    x2 = x.reshape(-1, n_cols).contiguous()
    gate3 = unit_stride_rows(gate.reshape(-1, inner, n_cols))  # a view for the layer's [T, heads, D] split
    y = torch.empty(shape, dtype=x.dtype, device=x.device)
    if x2.shape[0]:
        block = triton.next_power_of_2(n_cols)
        _gated_rms_norm_kernel[(x2.shape[0],)](
            x2, gate3, weight.contiguous(), y, x2 if out_rows is None else out_rows, n_cols, inner,
            gate3.stride(0), gate3.stride(1), eps,
            PRODUCT_DTYPE=_TL_DTYPES[torch.promote_types(weight.dtype, x.dtype)], HAS_OUT_ROWS=out_rows is not None,
            BLOCK=block, num_warps=min(max(block // 256, 1), 8),
        )  # fmt: skip
    return y
