"""Attention's q/k RMSNorm + partial RoPE in one Triton launch: one program per (token, head), queries and keys.

A program loads its head row once, normalises it in fp32 (zero-centred weight), and rotates the first rotary_dim
dims against their partner dim (d +- rotary_dim / 2), reloaded from memory and normalised alike. The roundings
follow the torch reference step by step (normed value, each product, the sum), so bf16 results agree with it.
It replaces two norm launches and about a dozen small RoPE ops per attention layer in a decode step.
`qk_norm_rope_to_cache` (decode) also writes k and v straight into their cache rows (programs H + KV .. copy v):
the two index_put launches per attention layer go, and k never exists outside the cache.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.strides import unit_stride_rows


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr,
    k_ptr,
    qw_ptr,
    kw_ptr,
    cos_ptr,
    sin_ptr,
    q_out_ptr,
    k_out_ptr,
    v_ptr,
    values_ptr,
    slot_ptr,
    pos_ptr,
    q_token_stride,
    q_head_stride,
    k_token_stride,
    k_head_stride,
    v_token_stride,
    v_head_stride,
    cache_slot_stride,
    cache_head_stride,
    cache_pos_stride,
    eps,
    H: tl.constexpr,
    KV: tl.constexpr,
    D: tl.constexpr,
    ROT: tl.constexpr,
    BLOCK_D: tl.constexpr,
    TO_CACHE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    dims = tl.arange(0, BLOCK_D)
    ok = dims < D
    if TO_CACHE:  # k (and v, heads H + KV ..) go to the cache rows [slot, head, position] of their token
        slot = tl.load(slot_ptr + token).to(tl.int64)
        cache_row = slot * cache_slot_stride + tl.load(pos_ptr + token).to(tl.int64) * cache_pos_stride
    else:
        cache_row = token * 0
    if head >= H + KV:  # only with TO_CACHE: v is copied as it is
        v_head = head - H - KV
        v_row = tl.load(v_ptr + token * v_token_stride + v_head * v_head_stride + dims, mask=ok)
        tl.store(values_ptr + cache_row + v_head * cache_head_stride + dims, v_row, mask=ok)
    else:
        _norm_rope_row(
            q_ptr, k_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, token, head, dims, ok, cache_row,
            q_token_stride, q_head_stride, k_token_stride, k_head_stride, cache_head_stride, eps,
            H, KV, D, ROT, TO_CACHE,
        )  # fmt: skip


@triton.jit
def _norm_rope_row(
    q_ptr, k_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, token, head, dims, ok, cache_row,
    q_token_stride, q_head_stride, k_token_stride, k_head_stride, cache_head_stride, eps,
    H: tl.constexpr, KV: tl.constexpr, D: tl.constexpr, ROT: tl.constexpr, TO_CACHE: tl.constexpr,
):  # fmt: skip
    """One q or k head row of one token: normalise, rotate, store (a k row into the cache with TO_CACHE)."""
    is_q = head < H
    if is_q:
        src = q_ptr + token * q_token_stride + head * q_head_stride
        dst = q_out_ptr + (token * H + head) * D
        w_ptr = qw_ptr
    else:
        src = k_ptr + token * k_token_stride + (head - H) * k_head_stride
        if TO_CACHE:
            dst = k_out_ptr + cache_row + (head - H) * cache_head_stride
        else:
            dst = k_out_ptr + (token * KV + head - H) * D
        w_ptr = kw_ptr
    x = tl.load(src + dims, mask=ok, other=0.0)
    xf = x.to(tl.float32)
    inv_rms = tl.math.rsqrt(tl.sum(xf * xf, axis=0) / D + eps)
    normed = (xf * inv_rms * (1.0 + tl.load(w_ptr + dims, mask=ok, other=0.0).to(tl.float32))).to(x.dtype)
    in_rot = dims < ROT
    first_half = dims < ROT // 2
    partner = tl.where(first_half, dims + ROT // 2, dims - ROT // 2)
    px = tl.load(src + partner, mask=in_rot, other=0.0).to(tl.float32)
    pw = tl.load(w_ptr + partner, mask=in_rot, other=0.0).to(tl.float32)
    p_normed = (px * inv_rms * (1.0 + pw)).to(x.dtype).to(tl.float32)
    rotated = tl.where(first_half, -p_normed, p_normed)
    cos = tl.load(cos_ptr + token * ROT + dims, mask=in_rot, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + token * ROT + dims, mask=in_rot, other=0.0).to(tl.float32)
    a = (normed.to(tl.float32) * cos).to(x.dtype).to(tl.float32)
    b = (rotated * sin).to(x.dtype).to(tl.float32)
    out = tl.where(in_rot, (a + b).to(x.dtype), normed)
    tl.store(dst + dims, out, mask=ok)


def qk_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `reference.qk_norm_rope`; q and k may be strided views (the last dim contiguous)."""
    tokens, heads, dim = q.shape
    kv_heads = k.shape[1]
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        q, k = q.contiguous(), k.contiguous()
    rot = cos.shape[-1]
    if rot % 2 or rot > dim:
        raise ValueError(f"rotary dim {rot} must be even and at most the head dim {dim}")
    q_out = torch.empty(tokens, heads, dim, dtype=q.dtype, device=q.device)
    k_out = torch.empty(tokens, kv_heads, dim, dtype=k.dtype, device=k.device)
    if tokens:
        _qk_norm_rope_kernel[(tokens, heads + kv_heads)](
            q, k, q_weight.contiguous(), k_weight.contiguous(), cos.contiguous(), sin.contiguous(), q_out, k_out,
            k, k_out, q_out, q_out, q.stride(0), q.stride(1), k.stride(0), k.stride(1), 0, 0, 0, 0, 0, eps,
            H=heads, KV=kv_heads, D=dim, ROT=rot, BLOCK_D=triton.next_power_of_2(dim), TO_CACHE=False, num_warps=1,
        )  # fmt: skip
    return q_out, k_out


def qk_norm_rope_to_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Same contract as `reference.qk_norm_rope_to_cache`: one launch for q, the cache's k rows and v rows."""
    tokens, heads, dim = q.shape
    kv_heads = k.shape[1]
    q, k, v = unit_stride_rows(q), unit_stride_rows(k), unit_stride_rows(v)
    rot = cos.shape[-1]
    if rot % 2 or rot > dim:
        raise ValueError(f"rotary dim {rot} must be even and at most the head dim {dim}")
    if keys.stride() != values.stride() or keys.stride(-1) != 1:
        raise ValueError(
            "keys and values must share one layout [slots, kv heads, length, head_dim], rows contiguous"
        )
    q_out = torch.empty(tokens, heads, dim, dtype=q.dtype, device=q.device)
    if tokens:
        _qk_norm_rope_kernel[(tokens, heads + 2 * kv_heads)](
            q, k, q_weight.contiguous(), k_weight.contiguous(), cos.contiguous(), sin.contiguous(), q_out, keys,
            v, values, slots, positions, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
            v.stride(1), keys.stride(0), keys.stride(1), keys.stride(2), eps,
            H=heads, KV=kv_heads, D=dim, ROT=rot, BLOCK_D=triton.next_power_of_2(dim), TO_CACHE=True, num_warps=1,
        )  # fmt: skip
    return q_out
