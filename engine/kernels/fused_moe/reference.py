"""Routed SwiGLU experts: `out[t] = sum_j w[t, j] * down_e(silu(gate_e x_t) * up_e x_t)`, e = ids[t, j]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Below this many (token, expert) pairs a gather + batched matmul beats a Python loop over the hit experts: the
# loop's per-iteration overhead dominates when each expert sees one or two tokens.
_GATHER_MAX_PAIRS = 16


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """x [T, H]; w_gate_up [E, 2I, H] (rows 0:I gate, I:2I up); w_down [E, H, I]; topk_* [T, K] -> [T, H]."""
    num_tokens, top_k = topk_ids.shape
    inter = w_down.shape[-1]
    if num_tokens * top_k <= _GATHER_MAX_PAIRS:
        return _moe_gathered(x, w_gate_up, w_down, topk_weights, topk_ids, inter)
    return _moe_loop_hit_experts(x, w_gate_up, w_down, topk_weights, topk_ids, inter)


def _moe_gathered(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    inter: int,
) -> torch.Tensor:
    num_tokens, top_k = topk_ids.shape
    flat_ids = topk_ids.reshape(-1)
    xs = x.repeat_interleave(top_k, dim=0).unsqueeze(-1)  # [T*K, H, 1]
    gate_up = torch.bmm(w_gate_up[flat_ids], xs).squeeze(-1)  # [T*K, 2I]
    act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    out = torch.bmm(w_down[flat_ids], act.unsqueeze(-1)).squeeze(-1)  # [T*K, H]
    out = out.view(num_tokens, top_k, -1) * topk_weights.to(out.dtype).unsqueeze(-1)
    return out.sum(1).to(x.dtype)


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
    token_of_pair = order // top_k
    weight_of_pair = topk_weights.reshape(-1)[order].to(x.dtype)
    out = torch.zeros_like(x)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        tokens = token_of_pair[start : start + count]
        gate_up = F.linear(x[tokens], w_gate_up[expert])
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        y = F.linear(act, w_down[expert]) * weight_of_pair[start : start + count, None]
        out.index_add_(0, tokens, y)
        start += count
    return out
