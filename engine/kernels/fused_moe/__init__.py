"""Routed experts (SwiGLU) for the tokens' top-k experts."""

from __future__ import annotations

import torch

from engine.kernels.dispatch import use_triton
from engine.kernels.fused_moe import grouped, reference


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    impl = reference
    if use_triton(x, w_gate_up):
        from engine.kernels.fused_moe import triton as impl
    elif grouped.available(x, w_down):
        impl = grouped
    return impl.fused_moe(x, w_gate_up, w_down, topk_weights, topk_ids)


__all__ = ["fused_moe"]
