"""Decode attention against the slot cache (plain torch): one new query token per sequence, GQA, causal by
position. The new token's key and value are already in the cache at its position."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slot_ids: torch.Tensor,
    positions: torch.Tensor,
    span: int | None = None,
    gate: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [B, H, D]; keys, values [S, KV, L, D] (one layer's cache); sequence b, in slot slot_ids[b], attends to
    its positions 0 .. positions[b]. `span` (a host int, optional) bounds the positions read: every
    positions[b] < span. Returns [B, H, D] in q.dtype, times sigmoid(gate) [B, H, D] when given (the gated
    attention's output gate)."""
    span = keys.shape[2] if span is None else span
    k = keys[:, :, :span].index_select(0, slot_ids)
    v = values[:, :, :span].index_select(0, slot_ids)
    mask = (torch.arange(span, device=q.device)[None, :] <= positions[:, None])[:, None, None, :]
    o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True)
    o = o.squeeze(2)
    return o if gate is None else o * torch.sigmoid(gate)
