"""The DeltaNet output norm: plain-weight RMSNorm times silu(gate)."""

from engine.kernels.dispatch import kernel
from engine.kernels.gated_rms_norm import reference

_TRITON = "engine.kernels.gated_rms_norm.triton"

gated_rms_norm = kernel(_TRITON)(reference.gated_rms_norm)

__all__ = ["gated_rms_norm"]
