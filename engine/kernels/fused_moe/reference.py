"""Routed SwiGLU experts: `out[t] = sum_j w[t, j] * down_e(silu(gate_e x_t) * up_e x_t)`, e = ids[t, j]."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """x [T, H]; w_gate_up [E, 2I, H] (rows 0:I gate, I:2I up); w_down [E, H, I]; topk_* [T, K] -> [T, H].

    When most experts are hit (decode batches), one padded batched matmul over all experts reads each expert once
    with a handful of ops; otherwise a loop over just the hit experts reads no more weights than needed."""
    inter = w_down.shape[-1]
    num_experts = w_gate_up.shape[0]
    if x.shape[0] == 1:
        return _moe_one_token(x, w_gate_up, w_down, topk_weights, topk_ids, inter)
    counts = torch.bincount(topk_ids.reshape(-1), minlength=num_experts)
    hit = int((counts > 0).sum())
    max_count = int(counts.max())
    if 2 * hit > num_experts and max_count * num_experts <= 4 * topk_ids.numel():
        return _moe_padded_all_experts(x, w_gate_up, w_down, topk_weights, topk_ids, counts, max_count, inter)
    return _moe_loop_hit_experts(x, w_gate_up, w_down, topk_weights, topk_ids, inter)


def _moe_one_token(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    inter: int,
) -> torch.Tensor:
    """Batch-1 decode: the chosen experts' weights read in place (a gather of their weights into one bmm copies
    them first, which measured 2-3x slower on a CPU), outputs weighted in one matmul."""
    top_k = topk_ids.shape[1]
    outs = x.new_empty(top_k, x.shape[-1])
    for j, expert in enumerate(topk_ids[0].tolist()):
        gate_up = F.linear(x, w_gate_up[expert])
        torch.mm(F.silu(gate_up[:, :inter]) * gate_up[:, inter:], w_down[expert].t(), out=outs[j : j + 1])
    return (topk_weights.to(x.dtype) @ outs).to(x.dtype)


def _moe_padded_all_experts(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    counts: torch.Tensor,
    max_count: int,
    inter: int,
) -> torch.Tensor:
    num_tokens, top_k = topk_ids.shape
    num_experts, hidden = w_gate_up.shape[0], x.shape[-1]
    flat_ids = topk_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    sorted_experts = flat_ids[order]
    offsets = torch.cumsum(counts, 0) - counts
    rank = torch.arange(flat_ids.numel(), device=x.device) - offsets[sorted_experts]  # slot within its expert
    x_pad = x.new_zeros(num_experts, max_count, hidden)
    x_pad[sorted_experts, rank] = x[order // top_k]
    gate_up = torch.bmm(x_pad, w_gate_up.transpose(1, 2))  # [E, C, 2I]
    act = F.silu(gate_up[..., :inter]) * gate_up[..., inter:]
    y = torch.bmm(act, w_down.transpose(1, 2))  # [E, C, H]
    pair_out = torch.empty(flat_ids.numel(), hidden, dtype=y.dtype, device=x.device)
    pair_out[order] = y[sorted_experts, rank]
    pair_out = pair_out.view(num_tokens, top_k, hidden) * topk_weights.to(y.dtype).unsqueeze(-1)
    return pair_out.sum(1).to(x.dtype)


def _moe_loop_hit_experts(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    inter: int,
) -> torch.Tensor:
    num_tokens, top_k = topk_ids.shape
    flat_ids = topk_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    counts = torch.bincount(flat_ids, minlength=w_gate_up.shape[0]).tolist()
    x_sorted = x[order // top_k]
    # Expert outputs land in their (token, slot) pair's row; one weighted sum over slots at the end replaces a
    # scatter-add per expert.
    pair_out = torch.empty(flat_ids.numel(), x.shape[-1], dtype=x.dtype, device=x.device)
    sorted_out = torch.empty_like(x_sorted)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        gate_up = F.linear(x_sorted[start : start + count], w_gate_up[expert])
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        sorted_out[start : start + count] = F.linear(act, w_down[expert])
        start += count
    pair_out[order] = sorted_out
    pair_out = pair_out.view(num_tokens, top_k, -1) * topk_weights.to(x.dtype).unsqueeze(-1)
    return pair_out.sum(1)
