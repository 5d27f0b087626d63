"""Decode attention in Triton, split-K (flash-decoding): no copy of the cache, no mask tensor, two launches.

Pass 1, one program per (sequence, KV head, split): the group of query heads that share the KV head (GQA) as one
[G, D] tile, an online softmax over the split's keys, read in place from its cache slot. The splits divide each
sequence's own context (positions 0 .. pos), not the cache's capacity: split i of SPLITS takes keys
[i * len, (i + 1) * len) with len = ceil(ceil((pos + 1) / SPLITS) / BLOCK_N) * BLOCK_N, so a 2k-token context in
a 32k cache keeps all its splits busy instead of four of sixty-four. It writes the split's running max, sum and
unnormalised output (a split past the context writes an empty one). Pass 2, one program per (sequence, query
head), merges the splits (and applies the layer's sigmoid output gate, when given: no launches of its own). SPLITS comes from the batch and head counts (enough programs to fill the GPU) and, in
eager mode, the host-known span; never from positions, so a CUDA graph replays the same grid for any lengths.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine import settings
from engine.kernels.strides import unit_stride_rows

# The interpreter multiplies bf16 bit patterns in tl.dot (silently wrong): there the operands go in as fp32.
_INTERPRETING = settings.triton_interpret()  # fixed when the module loads, as Triton's own decoration is
# Split each sequence's context until the pass-1 grid has about this many programs (two per SM on an H200's 132).
TARGET_PROGRAMS = 256
MAX_SPLITS = 64


@triton.jit
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    slot_ptr,
    pos_ptr,
    part_o_ptr,
    part_m_ptr,
    part_l_ptr,
    scale,
    q_stride_b,
    q_stride_h,
    cache_stride_slot,
    length,
    H: tl.constexpr,
    KV: tl.constexpr,
    D: tl.constexpr,
    SPLITS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    slot = tl.load(slot_ptr + b).to(tl.int64)
    pos = tl.load(pos_ptr + b).to(tl.int32)
    gi = tl.arange(0, BLOCK_G)
    g_ok = gi < H // KV
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < D
    heads = kvh * (H // KV) + gi
    q = tl.load(
        q_ptr + b * q_stride_b + heads[:, None] * q_stride_h + dd[None, :],
        mask=g_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_sum = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    base = slot * cache_stride_slot + kvh.to(tl.int64) * length * D
    context = tl.minimum(pos + 1, length)
    split_len = tl.cdiv(tl.cdiv(context, SPLITS), BLOCK_N) * BLOCK_N
    start = split * split_len
    for n0 in range(start, tl.minimum(start + split_len, context), BLOCK_N):
        nn = n0 + tl.arange(0, BLOCK_N)
        n_ok = nn < context
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + base + nn[:, None].to(tl.int64) * D + dd[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + nn[:, None].to(tl.int64) * D + dd[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale
        s = tl.where(n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l_sum = l_sum * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
        m = m_new
    part = (b * H + heads) * SPLITS + split
    tl.store(part_o_ptr + part[:, None] * D + dd[None, :], acc, mask=g_ok[:, None] & d_ok[None, :])
    tl.store(part_m_ptr + part, m, mask=g_ok)
    tl.store(part_l_ptr + part, l_sum, mask=g_ok)


@triton.jit
def _merge_kernel(
    part_o_ptr,
    part_m_ptr,
    part_l_ptr,
    o_ptr,
    gate_ptr,
    gate_stride_b,
    gate_stride_h,
    H: tl.constexpr,
    D: tl.constexpr,
    SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_GATE: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    ss = tl.arange(0, BLOCK_S)
    s_ok = ss < SPLITS
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < D
    row = (b * H + h) * SPLITS
    m = tl.load(part_m_ptr + row + ss, mask=s_ok, other=float("-inf"))
    l_sum = tl.load(part_l_ptr + row + ss, mask=s_ok, other=0.0)
    # Splits that saw no key keep m = -inf: their weight is 0 (position 0 is always in split 0).
    weight = tl.where(m == float("-inf"), 0.0, tl.exp(m - tl.max(m, axis=0)))
    acc = tl.load(
        part_o_ptr + (row + ss)[:, None] * D + dd[None, :], mask=s_ok[:, None] & d_ok[None, :], other=0.0
    )
    o = (tl.sum(weight[:, None] * acc, axis=0) / tl.sum(weight * l_sum, axis=0)).to(o_ptr.dtype.element_ty)
    if HAS_GATE:  # the layer's output gate, rounded where the reference rounds: o, sigmoid(gate), the product
        g = tl.load(gate_ptr + b * gate_stride_b + h * gate_stride_h + dd, mask=d_ok, other=0.0)
        gate = tl.sigmoid(g.to(tl.float32)).to(o_ptr.dtype.element_ty).to(tl.float32)
        o = (o.to(tl.float32) * gate).to(o_ptr.dtype.element_ty)
    tl.store(o_ptr + (b * H + h) * D + dd, o, mask=d_ok)


def split_count(programs: int, span: int, block_n: int) -> int:
    """Splits per (sequence, KV head): a power of two filling TARGET_PROGRAMS programs, capped near one per block
    of keys the longest sequence can have (rounded up to a power of two too: SPLITS is a compile-time constant,
    so an eager decode whose span grows each step compiles at most seven variants)."""
    wanted = triton.next_power_of_2(max(1, TARGET_PROGRAMS // programs))
    return min(wanted, MAX_SPLITS, triton.next_power_of_2(triton.cdiv(span, block_n)))


def decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slot_ids: torch.Tensor,
    positions: torch.Tensor,
    span: int | None = None,
    gate: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same contract as `reference.decode_attention`; `span` (every position below it, known in eager mode) caps the
    splits at one block of keys each. `gate` (a strided view is read in place) is applied by the merge pass."""
    batch, heads, dim = q.shape
    _, kv_heads, length, _ = keys.shape
    if heads % kv_heads:
        raise ValueError(f"query heads ({heads}) must be a multiple of KV heads ({kv_heads})")
    if not (keys.is_contiguous() and values.is_contiguous() and q.stride(-1) == 1):
        raise ValueError("the KV cache must be contiguous and q's last dim contiguous")
    gate = None if gate is None else unit_stride_rows(gate)
    o = torch.empty(batch, heads, dim, dtype=q.dtype, device=q.device)
    if not batch:
        return o
    block_n = 16 if _INTERPRETING else 64
    splits = split_count(batch * kv_heads, length if span is None else min(span, length), block_n)
    part_o = torch.empty(batch, heads, splits, dim, dtype=torch.float32, device=q.device)
    part_m = torch.empty(batch, heads, splits, dtype=torch.float32, device=q.device)
    part_l = torch.empty_like(part_m)
    block_d = triton.next_power_of_2(dim)
    _split_kernel[(batch, kv_heads, splits)](
        q, keys, values, slot_ids.contiguous(), positions.contiguous(), part_o, part_m, part_l, dim**-0.5,
        q.stride(0), q.stride(1), keys.stride(0), length,
        H=heads, KV=kv_heads, D=dim, SPLITS=splits,
        BLOCK_G=max(16, triton.next_power_of_2(heads // kv_heads)), BLOCK_N=block_n, BLOCK_D=block_d,
        UPCAST=_INTERPRETING, num_warps=4, num_stages=2,
    )  # fmt: skip
    _merge_kernel[(batch, heads)](
        part_o, part_m, part_l, o, o if gate is None else gate, *((0, 0) if gate is None else gate.stride()[:2]),
        H=heads, D=dim, SPLITS=splits, BLOCK_S=max(2, triton.next_power_of_2(splits)), BLOCK_D=block_d,
        HAS_GATE=gate is not None, num_warps=4,
    )  # fmt: skip
    return o
