"""Gated full attention: GQA with q/k RMSNorm, partial RoPE and a per-channel sigmoid output gate."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.cache import Cache
from engine.config import Config
from engine.forward_batch import ForwardBatch
from engine.kernels.decode_attention import decode_attention
from engine.kernels.qk_norm_rope import qk_norm_rope
from engine.layers.fused_linear import fuse_linear_weights, require_fused
from engine.layers.linear import linear
from engine.layers.norms import RMSNorm


class GatedAttention(nn.Module):
    def __init__(self, config: Config, cache_index: int) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.cache_index = cache_index  # which of the full-attention layers this is, in the cache
        hidden = config.hidden_size
        # q_proj emits, per head, [query (head_dim) | gate (head_dim)].
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim * 2, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.fused_qkv_proj: torch.Tensor | None = None  # set by `fuse_weights`

    def fuse_weights(self) -> None:
        self.fused_qkv_proj = fuse_linear_weights(self.q_proj, self.k_proj, self.v_proj)

    def _qkv_proj(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kv = self.num_kv_heads * self.head_dim
        return linear(x, require_fused(self.fused_qkv_proj, self)).split(
            [2 * self.num_heads * self.head_dim, kv, kv], dim=-1
        )

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        cache: Cache,
    ) -> torch.Tensor:
        tokens = x.shape[0]
        q_gate, k, v = self._qkv_proj(x)
        q_gate = q_gate.reshape(tokens, self.num_heads, 2 * self.head_dim)
        q, gate = q_gate[..., : self.head_dim], q_gate[..., self.head_dim :]
        k = k.reshape(tokens, self.num_kv_heads, self.head_dim)
        v = v.reshape(tokens, self.num_kv_heads, self.head_dim)
        q, k = qk_norm_rope(q, k, self.q_norm.weight, self.k_norm.weight, *rope, self.q_norm.eps)

        keys, values = cache.keys[self.cache_index], cache.values[self.cache_index]
        if batch.is_decode:
            out = self._decode(q, k, v, keys, values, batch)
        else:
            out = self._prefill(q, k, v, keys, values, batch)
        out = out.reshape(tokens, self.num_heads * self.head_dim) * torch.sigmoid(gate.reshape(tokens, -1))
        return linear(out, self.o_proj.weight)

    def _prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        offset = 0
        for slot, start, length in zip(batch.slot_list, batch.starts, batch.lengths, strict=True):
            end = start + length
            keys[slot, :, start:end] = k[offset : offset + length].transpose(0, 1)
            values[slot, :, start:end] = v[offset : offset + length].transpose(0, 1)
            q_seq = q[offset : offset + length].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
            k_seq, v_seq = keys[slot : slot + 1, :, :end], values[slot : slot + 1, :, :end]
            if start == 0:
                o = F.scaled_dot_product_attention(q_seq, k_seq, v_seq, is_causal=True, enable_gqa=True)
            else:  # continuing a cached sequence: query i sees keys 0 .. start + i
                mask = torch.ones(length, end, dtype=torch.bool, device=q.device).tril(diagonal=start)
                o = F.scaled_dot_product_attention(q_seq, k_seq, v_seq, attn_mask=mask, enable_gqa=True)
            out[offset : offset + length] = o[0].transpose(0, 1)
            offset += length
        return out

    def _decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        positions = batch.positions
        keys[batch.slots, :, positions] = k
        values[batch.slots, :, positions] = v
        # An eager batch knows on the host how far its keys reach (`span`): the torch path reads just that much.
        return decode_attention(q, keys, values, batch.slots, positions, span=batch.span)
