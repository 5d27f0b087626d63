"""Sort (token, expert) pairs by expert and pad each expert's run to whole M blocks (the grouped MoE GEMMs'
input): one sync-free Triton launch on a GPU, the torch reference elsewhere."""

from engine.kernels.dispatch import kernel
from engine.kernels.moe_align import reference

moe_align = kernel("engine.kernels.moe_align.triton")(reference.moe_align)

__all__ = ["moe_align"]
