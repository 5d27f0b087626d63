"""Attention's q/k RMSNorm + partial RoPE (at decode, with the k/v cache writes)."""

from engine.kernels.dispatch import kernel
from engine.kernels.qk_norm_rope import reference

_TRITON = "engine.kernels.qk_norm_rope.triton"

qk_norm_rope = kernel(_TRITON)(reference.qk_norm_rope)
qk_norm_rope_to_cache = kernel(_TRITON)(reference.qk_norm_rope_to_cache)

__all__ = ["qk_norm_rope", "qk_norm_rope_to_cache"]
