"""Decode attention over the slot cache: torch reference, or the split-K Triton kernels on a GPU."""

from __future__ import annotations

import torch

from engine.kernels.decode_attention import reference
from engine.kernels.dispatch import use_triton


def decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slot_ids: torch.Tensor,
    positions: torch.Tensor,
    span: int | None = None,
) -> torch.Tensor:
    impl = reference
    if use_triton(q, keys):
        from engine.kernels.decode_attention import triton as impl
    return impl.decode_attention(q, keys, values, slot_ids, positions, span)


__all__ = ["decode_attention"]
