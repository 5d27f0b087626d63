"""Routed SwiGLU experts for a few decode tokens, written for `torch.compile` (the CPU decode regions).

Every (token, expert) pair is a GEMV written as a broadcast multiply and sum over the hidden axis, reading its
expert's rows through `w[ids]`. Inductor fuses that gather into the reduction loop, so no expert weights are
copied: each pair reads its expert once, and the Python loop over experts (a dozen small ops per expert, most
of a decode step's overhead on a CPU) becomes one generated C++ kernel per projection. Pairs that share an
expert read it again, so this pays off only while tokens * top_k is small next to the number of experts."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

MoeFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def gathered_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Same contract as `fused_moe`: x [T, H]; w_gate_up [E, 2I, H]; w_down [E, H, I]; topk_* [T, K] -> [T, H]."""
    inter = w_down.shape[-1]
    gate_up = (x[:, None, None, :] * w_gate_up[topk_ids]).sum(-1)  # [T, K, 2I]
    act = F.silu(gate_up[..., :inter]) * gate_up[..., inter:]
    out = (act[:, :, None, :] * w_down[topk_ids]).sum(-1)  # [T, K, H]
    return (topk_weights.to(x.dtype)[..., None] * out).sum(1)
