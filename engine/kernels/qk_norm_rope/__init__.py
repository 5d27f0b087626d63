"""Attention's q/k RMSNorm + partial RoPE."""

from engine.kernels.dispatch import kernel
from engine.kernels.qk_norm_rope import reference

_TRITON = "engine.kernels.qk_norm_rope.triton"

qk_norm_rope = kernel(_TRITON)(reference.qk_norm_rope)

__all__ = ["qk_norm_rope"]
