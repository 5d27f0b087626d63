"""Decode attention over the slot cache: torch reference, or the split-K Triton kernels on a GPU."""

from engine.kernels.decode_attention import reference
from engine.kernels.dispatch import kernel

_TRITON = "engine.kernels.decode_attention.triton"

decode_attention = kernel(_TRITON)(reference.decode_attention)

__all__ = ["decode_attention"]
