"""Partial rotary embedding: NeoX half-rotation on the first `rotary_dim` dims of each head, the rest untouched
(applied with the q/k norms by `engine.kernels.qk_norm_rope`).

The checkpoint's interleaved M-RoPE reduces to this for text, where the three position streams are equal."""

from __future__ import annotations

import torch


class RotaryEmbedding:
    def __init__(self, rotary_dim: int, theta: float) -> None:
        self.rotary_dim = rotary_dim
        # Explicitly on the CPU: the model is built under the meta device, and these are not checkpoint tensors.
        self._cache: dict[torch.device, torch.Tensor] = {}
        self.inv_freq = 1.0 / (
            theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device="cpu") / rotary_dim)
        )

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [T, rotary_dim], computed in fp32 and rounded to the model dtype (as transformers does)."""
        freqs = self._cache.get(positions.device)
        if freqs is None:  # both halves' frequencies, so the angles need no cat
            freqs = self._cache[positions.device] = torch.cat([self.inv_freq, self.inv_freq]).to(
                positions.device
            )
        # int64 positions times fp32 frequencies: promoted to fp32 inside the one multiply (no conversion launch).
        angles = positions[:, None] * freqs[None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)
