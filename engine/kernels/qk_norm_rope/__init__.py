"""Attention's q/k RMSNorm + partial RoPE."""

from __future__ import annotations

import torch

from engine.kernels.dispatch import use_triton
from engine.kernels.qk_norm_rope import reference


def qk_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    impl = reference
    if use_triton(q, k):
        from engine.kernels.qk_norm_rope import triton as impl
    return impl.qk_norm_rope(q, k, q_weight, k_weight, cos, sin, eps)


__all__ = ["qk_norm_rope"]
