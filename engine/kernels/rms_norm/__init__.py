"""Zero-centred RMSNorm, optionally fused with the residual add."""

from engine.kernels.dispatch import kernel
from engine.kernels.rms_norm import reference

_TRITON = "engine.kernels.rms_norm.triton"

rms_norm = kernel(_TRITON)(reference.rms_norm)

__all__ = ["rms_norm"]
