"""MoE routing: softmax over all experts, keep the top k, renormalise the kept weights to sum 1."""

from __future__ import annotations

import torch


def router_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    return weights, ids
