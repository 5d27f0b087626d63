"""Depthwise causal conv1d + SiLU (prefill) and its one-step update (decode)."""

from __future__ import annotations

import torch

from engine.kernels.causal_conv1d import reference
from engine.kernels.dispatch import use_triton


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    conv_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    impl = reference
    if use_triton(x, weight):
        from engine.kernels.causal_conv1d import triton as impl
    return impl.causal_conv1d(x, weight, conv_state=conv_state, cu_seqlens=cu_seqlens)


def causal_conv1d_update(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, slot_ids: torch.Tensor | None = None
) -> torch.Tensor:
    impl = reference
    if use_triton(x, weight):
        from engine.kernels.causal_conv1d import triton as impl
    return impl.causal_conv1d_update(x, weight, conv_state, slot_ids)


__all__ = ["causal_conv1d", "causal_conv1d_update"]
