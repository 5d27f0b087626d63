"""MoE router: softmax -> top-k -> renormalise."""

from __future__ import annotations

import torch

from engine.kernels.dispatch import use_triton
from engine.kernels.router_topk import reference


def router_topk(
    logits: torch.Tensor, k: int, shared_gate: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    impl = reference
    if use_triton(logits):
        from engine.kernels.router_topk import triton as impl
    return impl.router_topk(logits, k, shared_gate)


__all__ = ["router_topk"]
