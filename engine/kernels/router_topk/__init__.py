"""MoE router: softmax -> top-k -> renormalise."""

from engine.kernels.dispatch import kernel
from engine.kernels.router_topk import reference

_TRITON = "engine.kernels.router_topk.triton"

router_topk = kernel(_TRITON)(reference.router_topk)

__all__ = ["router_topk"]
