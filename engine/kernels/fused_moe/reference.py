"""Routed SwiGLU experts: `out[t] = sum_j w[t, j] * down_e(silu(gate_e x_t) * up_e x_t)`, e = ids[t, j]."""

from __future__ import annotations

from typing import NamedTuple

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

    Tokens are sorted by expert and each hit expert runs two GEMMs over its tokens, reading no more weights than
    needed. (A padded bmm over all experts, or a gather of the chosen experts' weights into one bmm, measured
    slower on a CPU: they read or copy weights of experts no token needs.)"""
    inter = w_down.shape[-1]
    if x.shape[0] == 1:
        return _moe_one_token(x, w_gate_up, w_down, topk_weights, topk_ids, inter)
    return _moe_loop_hit_experts(x, w_gate_up, w_down, topk_weights, topk_ids, inter)


def _moe_one_token(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    inter: int,
) -> torch.Tensor:
    """Batch-1 decode: no sort, the chosen experts' weights read in place, outputs weighted in one matmul."""
    top_k = topk_ids.shape[1]
    outs = x.new_empty(top_k, x.shape[-1])
    for j, expert in enumerate(topk_ids[0].tolist()):
        gate_up = F.linear(x, w_gate_up[expert])
        torch.mm(F.silu(gate_up[:, :inter]) * gate_up[:, inter:], w_down[expert].t(), out=outs[j : j + 1])
    return (topk_weights.to(x.dtype) @ outs).to(x.dtype)


def _moe_loop_hit_experts(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    inter: int,
) -> torch.Tensor:
    pairs = sort_pairs(x, topk_ids, w_gate_up.shape[0])
    sorted_out = torch.empty_like(pairs.x_sorted)
    start = 0
    for expert, count in enumerate(pairs.counts.tolist()):
        if count == 0:
            continue
        gate_up = F.linear(pairs.x_sorted[start : start + count], w_gate_up[expert])
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        torch.mm(act, w_down[expert].t(), out=sorted_out[start : start + count])
        start += count
    return combine_pairs(sorted_out, topk_weights, pairs, x.shape[0])


class SortedPairs(NamedTuple):
    """(token, expert) pairs grouped by expert: what the loop and the grouped GEMMs both run on."""

    order: torch.Tensor  # pair index of each sorted row
    counts: torch.Tensor  # pairs per expert [E]
    token_of_pair: torch.Tensor  # token of each sorted row
    x_sorted: torch.Tensor  # that token's input, one row per pair


def sort_pairs(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int) -> SortedPairs:
    flat_ids = topk_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    token_of_pair = order // topk_ids.shape[1]
    counts = torch.bincount(flat_ids, minlength=num_experts)
    return SortedPairs(order, counts, token_of_pair, x.index_select(0, token_of_pair))


def combine_pairs(
    sorted_out: torch.Tensor, topk_weights: torch.Tensor, pairs: SortedPairs, num_tokens: int
) -> torch.Tensor:
    """Weighted outputs added straight into their tokens' rows (no unsorting copy of every pair)."""
    sorted_out.mul_(topk_weights.reshape(-1)[pairs.order].to(sorted_out.dtype).unsqueeze(-1))
    return sorted_out.new_zeros(num_tokens, sorted_out.shape[-1]).index_add_(
        0, pairs.token_of_pair, sorted_out
    )
