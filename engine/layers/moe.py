"""Sparse MoE block: softmax router -> top-k -> renormalised routed SwiGLU experts, plus a gated shared expert."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import Config
from engine.kernels import fused_moe, router_topk
from engine.kernels.fused_moe.gathered import MoeFn
from engine.layers.fused_linear import fuse_linear_weights, require_fused
from engine.layers.linear import linear
from engine.quant.weight import QuantizedExperts, QuantizedWeight, QuantTensor, replace_parameter


class Experts(nn.Module):
    """All routed experts as two fused tensors: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I]."""

    def __init__(self, num_experts: int, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * inter, hidden))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden, inter))
        # A GGUF model keeps its experts in their blocks: the two parameters are dropped and this is set instead.
        self.quantized: QuantizedExperts | None = None


class SharedExpert(nn.Module):
    """Its SwiGLU runs inside `moe`, on the fused input projection."""

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)


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
        # Set by `fuse_weights` when the shared expert has the routed experts' size: [E + 1, ...] stacks whose
        # last expert is the shared one, so it runs as one more (token, expert) pair in the same kernels.
        self.gate_up_with_shared: torch.Tensor | None = None
        self.down_with_shared: torch.Tensor | None = None
        # GGUF experts on a GPU: the shared expert is the last of `experts.quantized` (`fold_shared_expert`).
        self.shared_folded = False

    def fuse_weights(self) -> None:
        """One GEMM for everything that reads the block's input, and the shared expert folded into the experts
        when sizes allow: its gate logit becomes the weight of a (k + 1)-th pair (`router_topk(shared_gate=)`).
        Every parameter becomes a view of the fused tensors, so names and in-place edits keep working."""
        shared, experts = self.shared_expert, self.experts
        quantized = experts.quantized
        if quantized is not None and quantized.gate.data.device.type != "cpu" and self.fold_shared_expert():
            return
        if experts.quantized is not None or shared.gate_proj.weight.shape[0] != experts.down_proj.shape[-1]:
            self.fused_input_proj = fuse_linear_weights(
                self.gate, shared.gate_proj, shared.up_proj, self.shared_expert_gate
            )
            return
        self.fused_input_proj = fuse_linear_weights(self.gate, self.shared_expert_gate)
        shared_gate_up = torch.cat([shared.gate_proj.weight, shared.up_proj.weight])
        gate_up = torch.cat([experts.gate_up_proj.detach(), shared_gate_up[None]])
        down = torch.cat([experts.down_proj.detach(), shared.down_proj.weight.detach()[None]])
        n, inter = experts.gate_up_proj.shape[0], shared.gate_proj.weight.shape[0]
        experts.gate_up_proj = nn.Parameter(gate_up[:n], requires_grad=False)
        experts.down_proj = nn.Parameter(down[:n], requires_grad=False)
        shared.gate_proj.weight = nn.Parameter(gate_up[n, :inter], requires_grad=False)
        shared.up_proj.weight = nn.Parameter(gate_up[n, inter:], requires_grad=False)
        shared.down_proj.weight = nn.Parameter(down[n], requires_grad=False)
        self.gate_up_with_shared, self.down_with_shared = gate_up, down

    def fold_shared_expert(self) -> bool:
        """GGUF experts: append the shared expert to the stacks when its types and sizes are theirs (see
        `stacks_with_shared_expert`); the input projection becomes [router | shared expert gate]. False if it
        cannot."""
        folded = stacks_with_shared_expert(self.experts.quantized, self.shared_expert)
        if folded is None:
            return False
        self.fused_input_proj = fuse_linear_weights(self.gate, self.shared_expert_gate)
        self.experts.quantized = folded
        self.shared_folded = True
        return True

    def moe_weights(self) -> tuple:
        """What `moe` reads, in its argument order (after the input)."""
        input_proj = require_fused(self.fused_input_proj, self)
        if self.gate_up_with_shared is not None:
            return input_proj, self.gate_up_with_shared, self.down_with_shared, None
        experts = self.experts
        if self.shared_folded:
            return input_proj, experts.quantized, None, None
        shared_down = self.shared_expert.down_proj.weight
        if experts.quantized is not None:
            return input_proj, experts.quantized, None, shared_down
        return input_proj, experts.gate_up_proj, experts.down_proj, shared_down

    def moe_dims(self) -> tuple[int, int, int]:
        return self.gate.weight.shape[0], self.shared_expert.gate_proj.weight.shape[0], self.top_k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return moe(x, *self.moe_weights(), *self.moe_dims(), experts=fused_moe)


def stacks_with_shared_expert(experts: QuantizedExperts, shared: SharedExpert) -> QuantizedExperts | None:
    """GGUF experts with a shared expert of their types and sizes: the stacks with it appended as expert E (one
    copy of each stack at load), so decode runs it as one more pair in the same two launches instead of about ten
    launches of its own; its projections become views of the new stacks. None if the types differ.
    `fuse_weights` folds off the CPU only (a GPU, or the meta device the launch counts and compile checks model
    it with): on a CPU the stacks stay the memory-mapped file (a copy would be resident) and the experts run in a
    loop anyway."""
    parts = (shared.gate_proj, shared.up_proj, shared.down_proj)
    stacks = (experts.gate, experts.up, experts.down)
    for linear_, stack in zip(parts, stacks, strict=True):
        weight = linear_.weight
        if not isinstance(weight, QuantizedWeight) or len(weight.parts) != 1 or weight.in_perm is not None:
            return None
        part = weight.parts[0]
        if (part.kind, part.cols, part.data.shape) != (stack.kind, stack.cols, stack.data.shape[1:]):
            return None
    folded = []
    for linear_, stack in zip(parts, stacks, strict=True):
        weight = linear_.weight
        data = torch.cat([stack.data, weight.parts[0].data[None]])
        folded.append(QuantTensor(data, stack.kind, stack.cols))
        replace_parameter(
            linear_, "weight", QuantizedWeight([QuantTensor(data[-1], stack.kind, stack.cols)], weight.dtype)
        )
    return QuantizedExperts(*folded)


def moe(
    x: torch.Tensor,
    input_proj: torch.Tensor | QuantizedWeight,
    gate_up: torch.Tensor | QuantizedExperts,
    down: torch.Tensor | None,
    shared_down: torch.Tensor | QuantizedWeight | None,
    num_experts: int,
    shared_inter: int,
    top_k: int,
    experts: MoeFn,
) -> torch.Tensor:
    """x [T, hidden] -> [T, hidden]. `experts` runs SwiGLU experts on (token, expert) pairs (`fused_moe`, or
    `gathered_moe` inside a compiled decode graph). With `shared_down` None, `input_proj` is [router | shared
    expert gate] and the shared expert is expert `num_experts` of gate_up/down; else `input_proj` is [router |
    shared gate | shared up | shared expert gate] and the shared expert runs apart."""
    # The reference rounds the routing weights to the model dtype before mixing the experts; every experts
    # function does that rounding itself (the Triton kernels as they load them), so fp32 weights go in: no
    # conversion launch per layer.
    if shared_down is None:
        router_logits, shared_gate = linear(x, input_proj).split([num_experts, 1], dim=-1)
        weights, ids = router_topk(router_logits, top_k, shared_gate)
        if isinstance(gate_up, QuantizedExperts):
            return gate_up(x, weights, ids)
        return experts(x, gate_up, down, weights, ids)
    router_logits, gate, up, shared_gate = linear(x, input_proj).split(
        [num_experts, shared_inter, shared_inter, 1], dim=-1
    )
    shared = linear(F.silu(gate) * up, shared_down)
    weights, ids = router_topk(router_logits, top_k)
    if isinstance(gate_up, QuantizedExperts):
        routed = gate_up(x, weights, ids)
    else:
        routed = experts(x, gate_up, down, weights, ids)
    return routed + torch.sigmoid(shared_gate) * shared
