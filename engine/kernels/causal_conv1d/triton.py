"""Depthwise causal conv1d + SiLU in Triton: the prefill form (varlen, with a carried state) and the one-step
decode update.

Prefill: program (channel block, time block, sequence) computes a [BLOCK_T, BLOCK_D] output tile from W shifted
loads of the input; inputs before the sequence start come from the carried state (or are zero). The first time
block of each sequence also writes that sequence's new state (its last W pre-conv inputs), into a fresh tensor,
so no program reads what another writes.
Decode: program (channel block, batch row) shifts its slice of the state left by one, appends x, and emits one
output; each program owns its slice, so the in-place update has no races.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.strides import unit_stride_rows


@triton.jit
def _conv_input(
    x_ptr, state_ptr, tau, bos, seq_len, n, chans, d_mask, dim, HAS_STATE: tl.constexpr, W: tl.constexpr
):
    """Pre-conv input at sequence-relative times `tau` [BT] for channels `chans` [BD], as fp32 [BT, BD].

    tau < 0 reaches back into the carried state (column W + tau), or zero padding without one.
    """
    in_seq = (tau >= 0) & (tau < seq_len)
    x = tl.load(
        x_ptr + (bos + tau)[:, None].to(tl.int64) * dim + chans[None, :],
        mask=in_seq[:, None] & d_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    if HAS_STATE:
        from_state = (tau < 0) & (tau >= -W)
        s = tl.load(
            state_ptr + n.to(tl.int64) * dim * W + chans[None, :] * W + (W + tau)[:, None],
            mask=from_state[:, None] & d_mask[None, :],
            other=0.0,
        ).to(tl.float32)
        x = x + s
    return x


@triton.jit
def _causal_conv1d_kernel(
    x_ptr,
    w_ptr,
    state_ptr,
    y_ptr,
    new_state_ptr,
    cu_seqlens_ptr,
    dim,
    HAS_STATE: tl.constexpr,
    W: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    pid_d = tl.program_id(0)
    pid_t = tl.program_id(1)
    n = tl.program_id(2)
    bos = tl.load(cu_seqlens_ptr + n).to(tl.int32)
    seq_len = tl.load(cu_seqlens_ptr + n + 1).to(tl.int32) - bos
    chans = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    d_mask = chans < dim
    t0 = pid_t * BLOCK_T
    if t0 < seq_len:
        times = t0 + tl.arange(0, BLOCK_T)
        acc = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
        for j in tl.static_range(W):
            w_j = tl.load(w_ptr + chans * W + j, mask=d_mask, other=0.0).to(tl.float32)
            xin = _conv_input(
                x_ptr, state_ptr, times - (W - 1) + j, bos, seq_len, n, chans, d_mask, dim, HAS_STATE, W
            )
            acc += xin * w_j[None, :]
        y = acc * tl.sigmoid(acc)
        out_mask = (times < seq_len)[:, None] & d_mask[None, :]
        tl.store(
            y_ptr + (bos + times)[:, None].to(tl.int64) * dim + chans[None, :],
            y.to(y_ptr.dtype.element_ty),
            mask=out_mask,
        )
    if pid_t == 0:
        # New state: the last W pre-conv inputs of (state ++ sequence), column j = time seq_len - W + j.
        cols = tl.arange(0, BLOCK_W)
        last = _conv_input(
            x_ptr, state_ptr, seq_len - W + cols, bos, seq_len, n, chans, d_mask, dim, HAS_STATE, W
        )
        tl.store(
            new_state_ptr + n.to(tl.int64) * dim * W + chans[None, :] * W + cols[:, None],
            last.to(new_state_ptr.dtype.element_ty),
            mask=(cols < W)[:, None] & d_mask[None, :],
        )


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, T, D], weight [D, W], conv_state [N, D, W] -> (y [B, T, D], new_conv_state [N, D, W] in x.dtype)."""
    batch, length, dim = x.shape
    width = weight.shape[1]
    if cu_seqlens is None:
        cu_seqlens = torch.arange(0, batch + 1, device=x.device, dtype=torch.int32) * length
        max_len = length
    else:
        if batch != 1:
            raise ValueError("cu_seqlens needs packed input with batch size 1")
        max_len = int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item()) if cu_seqlens.numel() > 1 else 0
    n_seqs = cu_seqlens.numel() - 1
    x = x.contiguous()
    y = torch.empty_like(x)
    new_state = torch.empty(n_seqs, dim, width, dtype=x.dtype, device=x.device)
    if conv_state is not None:
        conv_state = conv_state.contiguous()
    if n_seqs == 0:
        return y, new_state
    # [64 x 128] tiles over 8 warps: [64 x 256] over 4 spilled ~1 KB per thread (AOT check, sm_89).
    block_d = min(triton.next_power_of_2(dim), 128)
    block_t = min(max(triton.next_power_of_2(max_len), 16), 64)
    grid = (triton.cdiv(dim, block_d), max(triton.cdiv(max_len, block_t), 1), n_seqs)
    _causal_conv1d_kernel[grid](
        x, weight.contiguous(), conv_state if conv_state is not None else x, y, new_state, cu_seqlens, dim,
        HAS_STATE=conv_state is not None, W=width, BLOCK_T=block_t, BLOCK_D=block_d,
        BLOCK_W=triton.next_power_of_2(width), num_warps=8,
    )  # fmt: skip
    return y, new_state


@triton.jit
def _causal_conv1d_update_kernel(
    x_ptr,
    w_ptr,
    state_ptr,
    y_ptr,
    slot_ptr,
    dim,
    stride_x,
    W: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_SLOTS: tl.constexpr,
):
    pid_d = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    chans = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    d_mask = chans < dim
    # x is read through its row stride: the layer passes a view of its fused input projection.
    x = tl.load(x_ptr + b * stride_x + chans, mask=d_mask, other=0.0)
    slot = b
    if HAS_SLOTS:
        slot = tl.load(slot_ptr + b).to(tl.int64)
    state_row = state_ptr + slot * dim * W + chans * W
    acc = tl.load(w_ptr + chans * W + (W - 1), mask=d_mask, other=0.0).to(tl.float32) * x.to(tl.float32)
    for j in tl.static_range(W - 1):
        # After the shift, column j holds what column j + 1 held; it meets weight column j.
        shifted = tl.load(state_row + j + 1, mask=d_mask, other=0.0)
        acc += tl.load(w_ptr + chans * W + j, mask=d_mask, other=0.0).to(tl.float32) * shifted.to(tl.float32)
        tl.store(state_row + j, shifted, mask=d_mask)
    tl.store(state_row + (W - 1), x.to(state_ptr.dtype.element_ty), mask=d_mask)
    tl.store(y_ptr + b * dim + chans, (acc * tl.sigmoid(acc)).to(y_ptr.dtype.element_ty), mask=d_mask)


def causal_conv1d_update(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, slot_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """One decode step. x [B, D]; conv_state [B, D, W] (contiguous) is shifted left and x appended, in place.
    With `slot_ids` [B], conv_state is the per-slot cache [S, D, W], read and written at those rows in place."""
    if not conv_state.is_contiguous():
        raise ValueError("conv_state must be contiguous: it is updated in place")
    batch, dim = x.shape
    width = weight.shape[1]
    x = unit_stride_rows(x)
    y = torch.empty(batch, dim, dtype=x.dtype, device=x.device)
    if batch:
        block_d = min(triton.next_power_of_2(dim), 512)
        _causal_conv1d_update_kernel[(triton.cdiv(dim, block_d), batch)](
            x, weight.contiguous(), conv_state, y, x if slot_ids is None else slot_ids.contiguous(), dim,
            x.stride(0), W=width, BLOCK_D=block_d, HAS_SLOTS=slot_ids is not None, num_warps=4,
        )  # fmt: skip
    return y
