"""Routed experts (SwiGLU) for the tokens' top-k experts: Triton on a GPU, grouped GEMMs for 2+ tokens on a CPU,
else the torch reference."""

from engine.kernels.dispatch import kernel
from engine.kernels.fused_moe import grouped, reference

fused_moe = kernel(
    "engine.kernels.fused_moe.triton",
    cpu_fast_path=(lambda x, w_gate_up, w_down, *_: grouped.available(x, w_down), grouped.fused_moe),
)(reference.fused_moe)

__all__ = ["fused_moe"]
