"""Routed SwiGLU experts for decode batches, on the routing as it is (no sort, no alignment): two launches, both
the packed GEMV of `engine/kernels/quant_matmul/gemv.py`, for experts in GGUF blocks or in floats (the bf16
model's experts take the same kernels, `fused_moe`'s decode path).

- `_gate_up_kernel`, one program per ((token, expert) pair, block of intermediate rows): that expert's gate rows
  and up rows against the token's x, both in one K loop (gate and up may be of different types; with two loops
  the gate sums lived across the second, and ptxas 12.8, Triton 3.6's, spilled them), storing silu(gate) * up.
- `_down_kernel`, one program per (token, block of hidden rows): the down rows of all the token's K experts at
  once, the experts lying across the program's threads (batch 1 reads its 8 experts in parallel, in 512 programs
  at hidden 2048, where running them one after another left 128 programs walking 8 experts each), then the
  weighted sum over the experts in registers: no [T * K, H] buffer, no extra reduction launch.

Roundings follow the torch reference: gate and up rounded to x.dtype before the SiLU; each expert's output and
its router weight rounded to x.dtype, their product rounded, the products summed in fp32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.quant_matmul.gemv import NUM_WARPS, aligned, decode_layout, rows_dot
from engine.kernels.quant_matmul.packed import (
    STEP_COLS,
    opaque_exponent,
    packed_step,
    pair_table,
    words_per_lane,
)
from engine.quant.formats import FLOAT_TYPES, GGMLType

# Rows a thread, the pairs' own (one token a program), spill-free on sm_86/89/90/120 under Triton 3.6 (ptxas 12.8)
# and 3.9 (`python -m engine.kernels.aot`): the fused gate/up loop holds two types' words, so 1 row of GGUF blocks
# (2 spilled 16-32 B for Q8_0), 2 of floats (1 spilled 4 B for bf16 on sm_90 under 3.6); the down kernel 4 (2
# spilled 12 B for Q5_K on sm_90 under 3.6; 4 also costs 8-11% fewer instructions per weight than 2 did).
DOWN_ROWS = 4


def gate_up_rows(gate_kind: int, up_kind: int) -> int:
    """R of the gate/up kernel: 2 for float experts (one 16-byte vector of 8 weights a word), 1 for GGUF blocks."""
    return 2 if GGMLType(gate_kind) in FLOAT_TYPES and GGMLType(up_kind) in FLOAT_TYPES else 1


@triton.jit
def _gate_up_dot(x_rows, gate_ptr, up_ptr, tab_ptr, gate_off, up_off, cols, expo, GATE_KIND: tl.constexpr,
                 GATE_W: tl.constexpr, UP_KIND: tl.constexpr, UP_W: tl.constexpr, L: tl.constexpr,
                 KS: tl.constexpr, R: tl.constexpr, NT: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    """`rows_dot` of the gate rows and of the up rows in one K loop -> fp32 ([R, NT], [R, NT])."""
    lanes = tl.arange(0, L * KS)[None, None, None, None, :]
    gate = tl.zeros([GATE_W, 1, R, NT, L * KS], dtype=tl.float32)
    up = tl.zeros([UP_W, 1, R, NT, L * KS], dtype=tl.float32)
    steps = cols // 256 if EVEN_K else tl.cdiv(cols, 256)
    for s in range(0, steps // KS):
        lane, step = lanes % L, s * KS + lanes // L
        gate = packed_step(
            gate, x_rows, gate_ptr, tab_ptr, gate_off, lane, step, cols, expo, GATE_KIND, GATE_W, L, EVEN_K
        )
        up = packed_step(
            up, x_rows, up_ptr, tab_ptr, up_off, lane, step, cols, expo, UP_KIND, UP_W, L, EVEN_K
        )
    gate = tl.sum(tl.sum(tl.sum(gate, axis=4), axis=0), axis=0)
    return gate, tl.sum(tl.sum(tl.sum(up, axis=4), axis=0), axis=0)


@triton.jit
def _gate_up_kernel(
    x_ptr,
    gate_ptr,
    up_ptr,
    tab_ptr,
    ids_ptr,
    act_ptr,
    hidden,
    inter,
    gate_expert_bytes,
    gate_row_bytes,
    up_expert_bytes,
    up_row_bytes,
    TOP_K: tl.constexpr,
    GATE_KIND: tl.constexpr,
    GATE_W: tl.constexpr,
    UP_KIND: tl.constexpr,
    UP_W: tl.constexpr,
    L: tl.constexpr,
    KS: tl.constexpr,
    NT: tl.constexpr,
    R: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    pair = tl.program_id(0)
    rows = tl.program_id(1) * (R * NT) + tl.arange(0, R)[:, None] * NT + tl.arange(0, NT)[None, :]  # [R, NT]
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    row = tl.minimum(rows, inter - 1).to(tl.int64)[None, None, :, :, None]
    across = tl.zeros([NT], dtype=tl.int64)[None, None, None, :, None]
    x_rows = x_ptr + (pair // TOP_K).to(tl.int64) * hidden + across
    expo = opaque_exponent(hidden)
    gate, up = _gate_up_dot(
        x_rows, gate_ptr, up_ptr, tab_ptr, expert * gate_expert_bytes + row * gate_row_bytes,
        expert * up_expert_bytes + row * up_row_bytes, hidden, expo, GATE_KIND, GATE_W, UP_KIND, UP_W, L, KS, R,
        NT, EVEN_K,
    )  # fmt: skip
    dtype = act_ptr.dtype.element_ty
    gate = gate.to(dtype).to(tl.float32)  # [R, NT]
    up = up.to(dtype).to(tl.float32)
    act = gate * tl.sigmoid(gate) * up
    tl.store(act_ptr + pair.to(tl.int64) * inter + rows, act.to(dtype), mask=rows < inter)


@triton.jit
def _down_kernel(
    act_ptr,
    down_ptr,
    tab_ptr,
    ids_ptr,
    pair_weight_ptr,
    out_ptr,
    hidden,
    inter,
    expert_bytes,
    row_bytes,
    TOP_K: tl.constexpr,
    KP: tl.constexpr,
    KIND: tl.constexpr,
    W: tl.constexpr,
    L: tl.constexpr,
    KS: tl.constexpr,
    NT: tl.constexpr,
    R: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    # Thread row nt is expert slot nt // NH, hidden row nt % NH (of R * NH per program): KP experts at a time.
    NH: tl.constexpr = NT // KP
    token = tl.program_id(0).to(tl.int64)
    nt = tl.arange(0, NT)
    first = tl.program_id(1) * (R * NH)
    rows = first + tl.arange(0, R)[:, None] * NH + (nt % NH)[None, :]  # [R, NT] hidden rows
    row = tl.minimum(rows, hidden - 1).to(tl.int64)
    expo = opaque_exponent(hidden)
    dtype = out_ptr.dtype.element_ty
    total = tl.zeros([R, NH], dtype=tl.float32)
    for group in tl.static_range(0, TOP_K, KP):
        slot = group + nt // NH
        pair = token * TOP_K + tl.minimum(slot, TOP_K - 1)  # [NT]
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        off = (expert[None, :] * expert_bytes + row * row_bytes)[None, None, :, :, None]
        x_rows = (act_ptr + pair * inter)[None, None, None, :, None]
        y = rows_dot(x_rows, down_ptr, tab_ptr, off, inter, expo, KIND, W, L, KS, 1, R, NT, EVEN_K)
        y = tl.sum(y, axis=0).to(dtype).to(tl.float32)  # [R, NT]
        pair_w = tl.load(pair_weight_ptr + pair).to(dtype).to(tl.float32)
        weighted = tl.where((slot < TOP_K)[None, :], (y * pair_w[None, :]).to(dtype).to(tl.float32), 0.0)
        total += tl.sum(tl.reshape(weighted, [R, KP, NH]), axis=1)
    out_rows = first + tl.arange(0, R)[:, None] * NH + tl.arange(0, NH)[None, :]
    tl.store(out_ptr + token * hidden + out_rows, total.to(dtype), mask=out_rows < hidden)


def routed_pairs(
    x: torch.Tensor,
    gate: torch.Tensor,
    gate_kind: int,
    up: torch.Tensor,
    up_kind: int,
    down: torch.Tensor,
    down_kind: int,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """x [T, H] contiguous; gate, up uint8 [E, I, row_bytes(H)] and down [E, H, row_bytes(I)], each with unit
    stride along its bytes (views of a fused gate|up tensor are fine); topk_* [T, K] -> [T, H] in x.dtype."""
    num_tokens, top_k = topk_ids.shape
    hidden, inter = x.shape[-1], gate.shape[1]
    gate, up, down = aligned(gate, gate_kind), aligned(up, up_kind), aligned(down, down_kind)
    ids = topk_ids.contiguous()
    table = pair_table(x.device)
    num_pairs = num_tokens * top_k

    first = decode_layout(
        1, num_pairs * inter, hidden, gate_kind, per_thread=gate_up_rows(gate_kind, up_kind)
    )
    act = torch.empty(num_pairs, inter, dtype=x.dtype, device=x.device)
    _gate_up_kernel[(num_pairs, triton.cdiv(inter, first.block_rows))](
        x, gate, up, table, ids, act, hidden, inter, gate.stride(0), gate.stride(1), up.stride(0), up.stride(1),
        TOP_K=top_k, GATE_KIND=int(gate_kind), GATE_W=words_per_lane(gate_kind, first.vpl), UP_KIND=int(up_kind),
        UP_W=words_per_lane(up_kind, first.vpl), L=first.lanes, KS=first.split, NT=first.row_threads,
        R=first.rows_per_thread, EVEN_K=hidden % STEP_COLS == 0, num_warps=NUM_WARPS,
    )  # fmt: skip

    # as many of a token's experts side by side as one row of threads holds (8 for Qwen3.5's top-8)
    lanes = decode_layout(1, num_pairs * hidden, inter, down_kind).lanes
    experts_at_once = min(triton.next_power_of_2(top_k), 32 * NUM_WARPS // lanes)
    second = decode_layout(
        1, num_pairs * hidden, inter, down_kind, min_row_threads=experts_at_once, per_thread=DOWN_ROWS
    )
    out = torch.empty_like(x)
    hidden_rows = second.rows_per_thread * (second.row_threads // experts_at_once)
    _down_kernel[(num_tokens, triton.cdiv(hidden, hidden_rows))](
        act, down, table, ids, topk_weights.contiguous(), out, hidden, inter, down.stride(0), down.stride(1),
        TOP_K=top_k, KP=experts_at_once, KIND=int(down_kind), W=words_per_lane(down_kind, second.vpl),
        L=second.lanes, KS=second.split, NT=second.row_threads, R=second.rows_per_thread,
        EVEN_K=inter % STEP_COLS == 0, num_warps=NUM_WARPS,
    )  # fmt: skip
    return out
