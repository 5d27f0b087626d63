"""Routed SwiGLU experts in Triton: the sorted-token grouped GEMM.

Pipeline (x [T, H], top-k ids [T, K], E experts, intermediate I):
1. align (`engine/kernels/moe_align`: one sync-free launch, capturable in a CUDA graph): the T*K (token, slot)
   pairs are sorted by expert and each expert's run is padded to a multiple of BLOCK_M with a sentinel (T*K).
   Every BLOCK_M rows of the sorted list then belong to one expert; `block_expert[b]` names it. The padded length
   is bounded by T*K + min(T*K, E) * (BLOCK_M - 1), so the grid size is known without reading the counts back.
2. `_gate_up_kernel`: per (row block, column block) it gathers the x rows of its pairs, multiplies by the expert's
   gate and up rows together, and stores silu(gate) * up for each pair: [T*K, I].
3. `_down_kernel`: the same gather over that activation, times the expert's down rows, scaled by the pair's
   router weight: [T*K, H].
4. sum over the K pairs of each token (torch; a [T, K, H] reduction).
Programs whose row block lies past the padded length exit at once. Program id 0 varies fastest over row blocks, so
neighbouring programs share the same weight columns, which stay in L2.

Decode (T*K small) and prefill use different block shapes, chosen by T*K (no autotuning: it needs a GPU driver,
and the CPU interpreter has none). The shared expert is an ordinary dense MLP; the model launches it beside this.

Decode with at most `PAIR_PATH_MAX_PAIRS` pairs skips the alignment and runs the routing as it is through the
quantized MoE's decode kernels (`engine/kernels/quant_moe/pairs.py`), which take float experts as the
"blocks" of their dtype: the packed GEMV with the down projection over all of a token's experts at once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine import settings
from engine.kernels.moe_align.triton import moe_align
from engine.kernels.quant_moe.pairs import routed_pairs
from engine.quant.formats import GGMLType

# The interpreter multiplies bf16 bit patterns in tl.dot (silently wrong), so it gets fp32 operands instead.
_INTERPRETING = settings.triton_interpret()  # fixed when the module loads, as Triton's own decoration is
# Up to this many (token, expert) pairs decode takes the pair path: the GEMV band's 16 tokens at top-8 plus the
# shared expert folded in as a 9th pair (2 launches; the grouped path is 4, with 16-row tiles mostly padding at
# these sizes). A first guess from launch counts, to be settled on a GPU: bench/gpu_check.py times both paths.
PAIR_PATH_MAX_PAIRS = 144
_FLOAT_KIND = {torch.float32: GGMLType.F32, torch.float16: GGMLType.F16, torch.bfloat16: GGMLType.BF16}


@triton.jit
def _gate_up_kernel(
    x_ptr,
    w_ptr,
    act_ptr,
    sorted_pair_ptr,
    block_expert_ptr,
    padded_len_ptr,
    num_pairs,
    hidden,
    inter,
    TOP_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(padded_len_ptr):
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_pair_ptr + rows)
    row_ok = pairs < num_pairs
    tokens = (pairs // TOP_K).to(tl.int64)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < inter
    ks = tl.arange(0, BLOCK_K)
    w_expert = w_ptr + expert * 2 * inter * hidden
    gate_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    up_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        k_ok = (k0 + ks) < hidden
        a = tl.load(
            x_ptr + tokens[:, None] * hidden + (k0 + ks)[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        w_mask = k_ok[:, None] & col_ok[None, :]
        # Weights are [2I, H] row-major; the tile is read transposed as [BLOCK_K, BLOCK_N].
        wg = tl.load(
            w_expert + cols[None, :].to(tl.int64) * hidden + (k0 + ks)[:, None], mask=w_mask, other=0.0
        )
        wu = tl.load(
            w_expert + (inter + cols[None, :]).to(tl.int64) * hidden + (k0 + ks)[:, None],
            mask=w_mask,
            other=0.0,
        )
        if UPCAST:
            a, wg, wu = a.to(tl.float32), wg.to(tl.float32), wu.to(tl.float32)
        gate_acc = tl.dot(a, wg, gate_acc)
        up_acc = tl.dot(a, wu, up_acc)
    # Round gate and up to the activation dtype first, as the torch path does between its matmul and the SiLU.
    gate = gate_acc.to(act_ptr.dtype.element_ty).to(tl.float32)
    up = up_acc.to(act_ptr.dtype.element_ty).to(tl.float32)
    act = gate * tl.sigmoid(gate) * up
    tl.store(
        act_ptr + pairs[:, None].to(tl.int64) * inter + cols[None, :],
        act.to(act_ptr.dtype.element_ty),
        mask=row_ok[:, None] & col_ok[None, :],
    )


@triton.jit
def _down_kernel(
    act_ptr,
    w_ptr,
    out_ptr,
    pair_weight_ptr,
    sorted_pair_ptr,
    block_expert_ptr,
    padded_len_ptr,
    num_pairs,
    hidden,
    inter,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(padded_len_ptr):
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_pair_ptr + rows)
    row_ok = pairs < num_pairs
    pairs = pairs.to(tl.int64)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < hidden
    ks = tl.arange(0, BLOCK_K)
    w_expert = w_ptr + expert * hidden * inter
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        k_ok = (k0 + ks) < inter
        a = tl.load(
            act_ptr + pairs[:, None] * inter + (k0 + ks)[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        w = tl.load(
            w_expert + cols[None, :].to(tl.int64) * inter + (k0 + ks)[:, None],
            mask=k_ok[:, None] & col_ok[None, :],
            other=0.0,
        )
        if UPCAST:
            a, w = a.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(a, w, acc)
    # The torch path rounds the expert output to x.dtype, then multiplies by the (x.dtype) router weight.
    y = acc.to(out_ptr.dtype.element_ty).to(tl.float32)
    pair_w = (
        tl.load(pair_weight_ptr + pairs, mask=row_ok, other=0.0).to(out_ptr.dtype.element_ty).to(tl.float32)
    )
    tl.store(
        out_ptr + pairs[:, None] * hidden + cols[None, :],
        (y * pair_w[:, None]).to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None] & col_ok[None, :],
    )


def _block_config(num_pairs: int, interpreting: bool) -> dict[str, int]:
    """Block shapes by size. Decode (few pairs): one M tile of 16 per expert, narrow N tiles so that the weight
    stream spreads over many programs (memory-bound). Prefill: larger M tiles reuse each weight tile."""
    if interpreting:
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=1)
    if num_pairs <= 512:
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=4)
    if num_pairs <= 8192:
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=3)
    return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """x [T, H]; w_gate_up [E, 2I, H] (rows 0:I gate, I:2I up); w_down [E, H, I]; topk_* [T, K] -> [T, H]."""
    num_tokens, top_k = topk_ids.shape
    num_pairs = num_tokens * top_k
    if num_pairs == 0:
        return torch.zeros_like(x)
    x = x.contiguous()
    w_gate_up, w_down = w_gate_up.contiguous(), w_down.contiguous()
    if num_pairs <= PAIR_PATH_MAX_PAIRS:
        return fused_moe_pairs(x, w_gate_up, w_down, topk_weights, topk_ids)
    return fused_moe_grouped(x, w_gate_up, w_down, topk_weights, topk_ids)


def fused_moe_pairs(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """The decode path: the experts' bytes, typed by their dtype, through the quantized MoE's pair kernels."""
    kind = _FLOAT_KIND[w_down.dtype]
    inter = w_down.shape[-1]
    gate_up = w_gate_up.view(torch.uint8)  # [E, 2I, 2H or 4H]: gate rows first
    return routed_pairs(
        x, gate_up[:, :inter], kind, gate_up[:, inter:], kind, w_down.view(torch.uint8), kind,
        topk_weights, topk_ids,
    )  # fmt: skip


def fused_moe_grouped(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """The sorted-token grouped GEMM (steps 1-4 of the module docstring)."""
    num_tokens, top_k = topk_ids.shape
    n_experts, two_inter, hidden = w_gate_up.shape
    inter = two_inter // 2
    num_pairs = num_tokens * top_k
    cfg = _block_config(num_pairs, _INTERPRETING)
    block_m, block_n, block_k = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    launch = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    sorted_pairs, block_expert, padded_len = moe_align(topk_ids, n_experts, block_m)
    m_blocks = block_expert.numel()
    upcast = _INTERPRETING and x.dtype == torch.bfloat16

    act = torch.empty(num_pairs, inter, dtype=x.dtype, device=x.device)
    _gate_up_kernel[(m_blocks, triton.cdiv(inter, block_n))](
        x, w_gate_up, act, sorted_pairs, block_expert, padded_len, num_pairs, hidden, inter,
        TOP_K=top_k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, UPCAST=upcast, **launch,
    )  # fmt: skip
    per_pair = torch.empty(num_pairs, hidden, dtype=x.dtype, device=x.device)
    _down_kernel[(m_blocks, triton.cdiv(hidden, block_n))](
        act, w_down, per_pair, topk_weights.contiguous(), sorted_pairs, block_expert, padded_len, num_pairs,
        hidden, inter, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, UPCAST=upcast, **launch,
    )  # fmt: skip
    return per_pair.view(num_tokens, top_k, hidden).sum(1)
