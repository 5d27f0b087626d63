"""Sparse MoE block: softmax router -> top-k -> renormalised routed SwiGLU experts, plus a gated shared expert."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import Config
from engine.kernels import fused_moe, router_topk
from engine.kernels.fused_moe.gathered import MoeFn
from engine.layers.fused_linear import fuse_linear_weights


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

        self.fused_input_proj: torch.Tensor | None = None  # set by `fuse_weights`
        self.decode_experts: MoeFn | None = None  # set by `use_decode_experts`
        # The gathered form reads one expert per (token, expert) pair: worth it while the pairs are few.
        self.max_gathered_tokens = max(1, 2 * config.num_experts // self.top_k)

    def use_decode_experts(self, experts: MoeFn) -> None:
        """Run decode-sized CPU batches through `experts` (the compiled gathered form, see `gathered.py`)."""
        self.decode_experts = experts

    def fuse_weights(self) -> None:
        """Everything that reads the block's input as one GEMM: [router | shared gate | shared up | shared
        expert gate]."""
        shared = self.shared_expert
        self.fused_input_proj = fuse_linear_weights(
            self.gate, shared.gate_proj, shared.up_proj, self.shared_expert_gate
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_input_proj is None:
            router_logits, shared_gate = self.gate(x), self.shared_expert_gate(x)
            shared = self.shared_expert(x)
        else:
            inter = self.shared_expert.gate_proj.weight.shape[0]
            router_logits, gate, up, shared_gate = F.linear(x, self.fused_input_proj).split(
                [self.gate.weight.shape[0], inter, inter, 1], dim=-1
            )
            shared = self.shared_expert.down_proj(F.silu(gate) * up)
        weights, ids = router_topk(router_logits, self.top_k)
        # The reference rounds the routing weights to the model dtype before mixing the experts.
        experts = fused_moe
        if self.decode_experts is not None and x.is_cpu and x.shape[0] <= self.max_gathered_tokens:
            experts = self.decode_experts
        routed = experts(x, self.experts.gate_up_proj, self.experts.down_proj, weights.to(x.dtype), ids)
        return routed + torch.sigmoid(shared_gate) * shared
