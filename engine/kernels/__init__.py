"""Kernel ops of the engine. Each op runs its Triton kernel on CUDA (or under TRITON_INTERPRET=1) and its
plain-torch reference otherwise; `engine.kernels.dispatch.use_triton` decides."""

from engine.kernels.causal_conv1d import causal_conv1d, causal_conv1d_update
from engine.kernels.decode_attention import decode_attention
from engine.kernels.fused_moe import fused_moe
from engine.kernels.gated_delta_rule import (
    chunk_gated_delta_rule,
    fused_recurrent_gated_delta_rule,
    gated_delta_rule_decode,
)
from engine.kernels.gated_rms_norm import gated_rms_norm
from engine.kernels.qk_norm_rope import qk_norm_rope
from engine.kernels.rms_norm import rms_norm
from engine.kernels.router_topk import router_topk

__all__ = [
    "causal_conv1d",
    "causal_conv1d_update",
    "chunk_gated_delta_rule",
    "decode_attention",
    "fused_moe",
    "fused_recurrent_gated_delta_rule",
    "gated_delta_rule_decode",
    "gated_rms_norm",
    "qk_norm_rope",
    "rms_norm",
    "router_topk",
]
