"""Gated delta rule: chunked (prefill), recurrent, and the gated decode step; Triton on GPU, torch reference
elsewhere. `gated_delta_rule_decode` is one launch on a GPU instead of seven gate kernels, two state gathers and
two scatters."""

from engine.kernels.dispatch import kernel
from engine.kernels.gated_delta_rule import reference

_TRITON = "engine.kernels.gated_delta_rule.triton"

chunk_gated_delta_rule = kernel(_TRITON)(reference.chunk_gated_delta_rule)
fused_recurrent_gated_delta_rule = kernel(_TRITON, name="fused_recurrent_gated_delta_rule")(
    reference.recurrent_gated_delta_rule
)
gated_delta_rule_decode = kernel(_TRITON)(reference.gated_delta_rule_decode)

__all__ = ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "gated_delta_rule_decode"]
