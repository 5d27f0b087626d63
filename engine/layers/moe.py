"""Sparse MoE block: softmax router -> top-k -> renormalised routed SwiGLU experts, plus a gated shared expert."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import Config
from engine.kernels import fused_moe, router_topk


class Experts(nn.Module):
    """All routed experts as two fused tensors: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I]."""

    def __init__(self, num_experts: int, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * inter, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, inter))


class SharedExpert(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoeBlock(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.top_k = config.num_experts_per_tok
        self.gate = nn.Linear(hidden, config.num_experts, bias=False)  # the router
        self.experts = Experts(config.num_experts, hidden, config.moe_intermediate_size)
        self.shared_expert = SharedExpert(hidden, config.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = router_topk(self.gate(x), self.top_k)
        # The reference rounds the routing weights to the model dtype before mixing the experts.
        routed = fused_moe(x, self.experts.gate_up_proj, self.experts.down_proj, weights.to(x.dtype), ids)
        shared = torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return routed + shared
