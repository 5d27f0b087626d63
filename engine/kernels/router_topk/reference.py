"""MoE routing: softmax over all experts, keep the top k, renormalise the kept weights to sum 1."""

from __future__ import annotations

import torch


def router_topk(
    logits: torch.Tensor, k: int, shared_gate: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (weights fp32 [T, k], ids int64 [T, k]). With `shared_gate` [T, 1] (the shared expert's
    gate logit) one more pair per token: expert E, weighted sigmoid(shared_gate), not renormalised."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    if shared_gate is None:
        return weights, ids
    shared_id = torch.full_like(ids[:, :1], logits.shape[-1])
    return torch.cat([weights, torch.sigmoid(shared_gate.float())], -1), torch.cat([ids, shared_id], -1)
