"""Attention's query/key preparation: zero-centred RMSNorm per head, then partial NeoX RoPE (plain torch)."""

from __future__ import annotations

import torch

from engine.kernels.rms_norm.reference import rms_norm


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, head_dim]; cos, sin [T, rotary_dim]: NeoX half-rotation of the first rotary_dim dims."""
    rot_dim = cos.shape[-1]
    rot, rest = x[..., :rot_dim], x[..., rot_dim:]
    half = rot_dim // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    rot = rot * cos[:, None, :] + rotated_half * sin[:, None, :]
    return torch.cat([rot, rest], dim=-1)


def qk_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, H, D], k [T, KV, D] (views allowed) -> normed and rotated q, k (new tensors, q.dtype)."""
    q, k = rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps)
    return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)


def qk_norm_rope_to_cache(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Decode: `qk_norm_rope`, then token t's k and v written at `keys/values[slots[t], :, positions[t]]` (caches
    [S, KV, L, D], in place). Returns the normed, rotated q."""
    q, k = qk_norm_rope(q, k, q_weight, k_weight, cos, sin, eps)
    keys[slots, :, positions] = k
    values[slots, :, positions] = v
    return q
