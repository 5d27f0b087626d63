"""Depthwise causal conv1d + SiLU (prefill) and its one-step update (decode)."""

from engine.kernels.causal_conv1d import reference
from engine.kernels.dispatch import kernel

_TRITON = "engine.kernels.causal_conv1d.triton"

causal_conv1d = kernel(_TRITON)(reference.causal_conv1d)
causal_conv1d_update = kernel(_TRITON)(reference.causal_conv1d_update)

__all__ = ["causal_conv1d", "causal_conv1d_update"]
