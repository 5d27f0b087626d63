"""Routed SwiGLU experts whose weights stay in GGUF blocks: `out[t] = sum_j w[t, j] * down_e(silu(gate_e x_t) *
up_e x_t)`, e = ids[t, j].

The loop of `fused_moe`'s reference (tokens sorted by expert, one pass per hit expert; batch 1 reads the chosen
experts in place), with each projection a `quant_matmul` reference call on that expert's blocks: only routed
experts are dequantized, in row chunks. Gate and up are separate tensors (GGUF's ffn_gate_exps / ffn_up_exps) and
may differ in type from each other and from down."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from engine.kernels.fused_moe.reference import combine_pairs, sort_pairs
from engine.kernels.quant_matmul.reference import quant_matmul


def quant_moe(
    x: torch.Tensor,
    gate: torch.Tensor,
    gate_kind: int,
    up: torch.Tensor,
    up_kind: int,
    down: torch.Tensor,
    down_kind: int,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """x [T, H]; gate, up uint8 [E, I, row_bytes(H)]; down uint8 [E, H, row_bytes(I)]; topk_weights [T, K] float,
    topk_ids [T, K] int64 -> [T, H] in x.dtype."""
    return routed_experts(
        x, gate, gate_kind, up, up_kind, down, down_kind, topk_weights, topk_ids, quant_matmul
    )


def routed_experts(
    x: torch.Tensor,
    gate: torch.Tensor,
    gate_kind: int,
    up: torch.Tensor,
    up_kind: int,
    down: torch.Tensor,
    down_kind: int,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    quant_matmul: Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor],
) -> torch.Tensor:
    """The loop over hit experts with the given `quant_matmul` (the reference's, or the CPU kernel's)."""
    hidden, inter = x.shape[-1], gate.shape[1]

    def expert_mlp(rows: torch.Tensor, expert: int, out: torch.Tensor) -> None:
        act = F.silu(quant_matmul(rows, gate[expert], gate_kind, hidden))
        act.mul_(quant_matmul(rows, up[expert], up_kind, hidden))
        out.copy_(quant_matmul(act, down[expert], down_kind, inter))

    if x.shape[0] == 1:
        # Batch-1 decode: no sort, the chosen experts in order, outputs weighted in one matmul.
        top_k = topk_ids.shape[1]
        outs = x.new_empty(top_k, hidden)
        for j, expert in enumerate(topk_ids[0].tolist()):
            expert_mlp(x, expert, outs[j : j + 1])
        return (topk_weights.to(x.dtype) @ outs).to(x.dtype)
    pairs = sort_pairs(x, topk_ids, gate.shape[0])
    sorted_out = torch.empty_like(pairs.x_sorted)
    start = 0
    for expert, count in enumerate(pairs.counts.tolist()):
        if count:
            rows = slice(start, start + count)
            expert_mlp(pairs.x_sorted[rows], expert, sorted_out[rows])
            start += count
    return combine_pairs(sorted_out, topk_weights, pairs, x.shape[0])
