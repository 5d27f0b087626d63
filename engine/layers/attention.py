"""Gated full attention: GQA with q/k RMSNorm, partial RoPE and a per-channel sigmoid output gate.

A prefill chunk that continues a cached sequence attends causally aligned to the bottom right (query i of n sees
keys 0 .. end - n + i), which `prefill_attention` asks of SDPA without a dense mask: a dense [n, end] mask rules
out the flash kernel, and with grouped KV heads the memory-efficient one too, leaving the math path and its
[heads, n, end] fp32 scores (4 GiB at a 2,048-token chunk of a 32k context)."""

from __future__ import annotations

import torch
from torch import nn
from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention
from torch.nn.attention.bias import causal_lower_right
from torch.nn.functional import scaled_dot_product_attention

from engine.cache import Cache
from engine.config import Config
from engine.forward_batch import ForwardBatch
from engine.kernels.decode_attention import decode_attention
from engine.kernels.qk_norm_rope import qk_norm_rope, qk_norm_rope_to_cache
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
        keys, values = cache.keys[self.cache_index], cache.values[self.cache_index]
        norm_weights = (self.q_norm.weight, self.k_norm.weight)
        if batch.is_decode:
            # One launch: q, k normed and rotated, k and v written into their cache rows.
            q = qk_norm_rope_to_cache(
                q, k, v, *norm_weights, *rope, self.q_norm.eps, keys, values, batch.slots, batch.positions
            )
            # An eager batch knows on the host how far its keys reach (`span`): the torch path reads just that much.
            # The output gate is applied as the attention output is stored.
            out = decode_attention(q, keys, values, batch.slots, batch.positions, span=batch.span, gate=gate)
        else:
            q, k = qk_norm_rope(q, k, *norm_weights, *rope, self.q_norm.eps)
            # Gated per head on the [T, heads, head_dim] views: flattening the gate view first would copy it.
            out = self._prefill(q, k, v, keys, values, batch) * torch.sigmoid(gate)
        out = out.reshape(tokens, self.num_heads * self.head_dim)
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
            o = prefill_attention(q_seq, keys[slot : slot + 1, :, :end], values[slot : slot + 1, :, :end])
            out[offset : offset + length] = o[0].transpose(0, 1)
            offset += length
        return out


# The most a query block's attention scores may take where no fused kernel runs (CPU, or a GPU without flash and
# memory-efficient kernels for these inputs): [heads, rows, keys] fp32 per block.
SCORE_BLOCK_BYTES = 512 * 2**20


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of a chunk's n queries over all `end` keys of its sequence, aligned to the bottom right:
    q [1, H, n, D] are positions end - n .. end - 1, k and v [1, H_kv, end, D]. On a GPU: the flash kernel (grouped
    KV heads natively, the causal bias as its lower-right causal mode, memory O(n)); else, with the KV heads
    repeated for this chunk, the memory-efficient kernel (lower-right causal mask type, memory O(end)); else, and
    on a CPU, query blocks whose scores stay within SCORE_BLOCK_BYTES."""
    if _has_fused_kernels(q.device):
        if _takes(can_use_flash_attention, q, k, v, gqa=True):
            return _lower_right(q, k, v, gqa=True)
        group = q.shape[1] // k.shape[1]
        k_rep, v_rep = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        if _takes(can_use_efficient_attention, q, k_rep, v_rep, gqa=False):
            return _lower_right(q, k_rep, v_rep, gqa=False)
        del k_rep, v_rep
    return _in_query_blocks(q, k, v)


def prefill_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The plain-torch reference of `prefill_attention` (and the path it replaced): the same attention through a
    dense [n, end] boolean mask. On a GPU SDPA can run this only through its math kernel ([heads, n, end] scores)."""
    n, end = q.shape[-2], k.shape[-2]
    mask = torch.ones(n, end, dtype=torch.bool, device=q.device).tril(diagonal=end - n)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _lower_right(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> torch.Tensor:
    bias = causal_lower_right(q.shape[-2], k.shape[-2])
    return scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)


def _in_query_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Blocks of query rows, each over the keys it can see (0 .. its last row's position) with its own
    lower-right causal bias: no [n, end] mask or score matrix is ever whole."""
    n, end = q.shape[-2], k.shape[-2]
    gqa = k.shape[1] != q.shape[1]
    rows = max(16, SCORE_BLOCK_BYTES // (q.shape[1] * end * 4))
    if rows >= n:
        return _lower_right(q, k, v, gqa)
    out = torch.empty_like(q)
    for first in range(0, n, rows):
        last = min(n, first + rows)
        reach = end - n + last  # keys the block's last query sees
        out[:, :, first:last] = _lower_right(q[:, :, first:last], k[:, :, :reach], v[:, :, :reach], gqa)
    return out


def _has_fused_kernels(device: torch.device) -> bool:
    """SDPA's flash and memory-efficient kernels (and the checks of which inputs they take) are CUDA's."""
    return device.type == "cuda"


def _takes(check, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gqa: bool) -> bool:
    """Whether SDPA's `check` kernel (flash or memory-efficient) takes these inputs without a mask."""
    return bool(check(SDPAParams(q, k, v, None, 0.0, False, gqa), False))
