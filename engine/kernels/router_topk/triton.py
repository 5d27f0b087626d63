"""MoE routing in Triton: softmax over the experts, top-k, renormalise — one program per token.

The k selections are k passes of argmax over the row held in registers (k = 8, E = 256): cheaper than a sort
and exact. Ties go to the lower expert index.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.strides import unit_stride_rows


@triton.jit
def _router_topk_kernel(
    logits_ptr,
    shared_gate_ptr,
    weights_ptr,
    ids_ptr,
    n_experts,
    stride_logits,
    stride_shared,
    TOP_K: tl.constexpr,
    OUT_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
    HAS_SHARED: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_E)
    logits = tl.load(logits_ptr + row * stride_logits + cols, mask=cols < n_experts, other=float("-inf"))
    logits = logits.to(tl.float32)
    probs = tl.exp(logits - tl.max(logits, axis=0))
    probs = probs / tl.sum(probs, axis=0)
    probs = tl.where(cols < n_experts, probs, -1.0)  # below any probability: padding is never picked
    slots = tl.arange(0, BLOCK_K)
    picked_w = tl.zeros([BLOCK_K], dtype=tl.float32)
    picked_id = tl.zeros([BLOCK_K], dtype=tl.int64)
    for j in tl.static_range(TOP_K):
        best = tl.max(probs, axis=0)
        best_id = tl.min(tl.where(probs == best, cols, BLOCK_E), axis=0)
        picked_w = tl.where(slots == j, best, picked_w)
        picked_id = tl.where(slots == j, best_id.to(tl.int64), picked_id)
        probs = tl.where(cols == best_id, -2.0, probs)
    picked_w = picked_w / tl.sum(picked_w, axis=0)
    keep = slots < TOP_K
    tl.store(weights_ptr + row * OUT_K + slots, picked_w, mask=keep)
    tl.store(ids_ptr + row * OUT_K + slots, picked_id, mask=keep)
    if HAS_SHARED:  # the shared expert as pair TOP_K: expert n_experts, weight sigmoid(its gate logit)
        shared_w = tl.sigmoid(tl.load(shared_gate_ptr + row * stride_shared).to(tl.float32))
        tl.store(weights_ptr + row * OUT_K + TOP_K, shared_w)
        tl.store(ids_ptr + row * OUT_K + TOP_K, row * 0 + n_experts)  # int64, as the other ids


def router_topk(
    logits: torch.Tensor, k: int, shared_gate: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (weights fp32 [T, k], ids int64 [T, k]); weights sum to 1 per token. With `shared_gate`
    [T, 1]: a (k + 1)-th pair per token, expert E weighted sigmoid(shared_gate) (as `reference.router_topk`)."""
    num_tokens, n_experts = logits.shape
    if not 0 < k <= n_experts:
        raise ValueError(f"top-k must be in 1..{n_experts}, got {k}")
    out_k = k + (shared_gate is not None)
    # Both are read through their row strides: the MoE block passes views of its fused input projection.
    logits = unit_stride_rows(logits)
    weights = torch.empty(num_tokens, out_k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(num_tokens, out_k, dtype=torch.int64, device=logits.device)
    if num_tokens:
        block_e = triton.next_power_of_2(n_experts)
        shared = logits if shared_gate is None else shared_gate
        _router_topk_kernel[(num_tokens,)](
            logits, shared, weights, ids, n_experts, logits.stride(0), shared.stride(0),
            TOP_K=k, OUT_K=out_k, BLOCK_E=block_e, BLOCK_K=triton.next_power_of_2(k),
            HAS_SHARED=shared_gate is not None, num_warps=min(max(block_e // 256, 1), 4),
        )  # fmt: skip
    return weights, ids
