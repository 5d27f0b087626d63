"""Gated DeltaNet: the linear-attention mixer of three layers out of four."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from engine.cache import Cache
from engine.config import Config
from engine.forward_batch import ForwardBatch
from engine.kernels import (
    causal_conv1d,
    causal_conv1d_update,
    chunk_gated_delta_rule,
    gated_delta_rule_decode,
    gated_rms_norm,
)
from engine.kernels.gated_delta_rule.gates import deltanet_gates
from engine.layers.fused_linear import fuse_linear_weights, require_fused
from engine.layers.linear import linear
from engine.layers.norms import GatedRMSNorm
from engine.quant.weight import QuantizedWeight


class MixerWeights(NamedTuple):
    """The layer's weights as `deltanet_decode` and prefill read them."""

    in_proj: torch.Tensor  # fused [qkv | z | b | a]
    conv_weight: torch.Tensor  # [conv_dim, width]
    A_log: torch.Tensor
    dt_bias: torch.Tensor
    norm_weight: torch.Tensor
    out_proj: torch.Tensor | QuantizedWeight  # in the column order `out_rows` writes (stored order, for GGUF)
    out_rows: torch.Tensor | None  # where the norm writes each V head (see `QuantizedWeight.input_groups`)


class MixerDims(NamedTuple):
    heads_k: int
    heads_v: int
    dim_k: int
    dim_v: int
    eps: float


class DecodeStates(NamedTuple):
    """Views of the batch's rows (slot_ids None), or the whole per-slot caches and the slots to touch."""

    conv: torch.Tensor
    recurrent: torch.Tensor
    slot_ids: torch.Tensor | None


class GatedDeltaNet(nn.Module):
    def __init__(self, config: Config, cache_index: int) -> None:
        super().__init__()
        self.cache_index = cache_index  # which of the DeltaNet layers this is, in the cache
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.value_dim = config.linear_value_dim
        conv_dim = config.linear_conv_dim
        hidden = config.hidden_size
        # Channel order of in_proj_qkv (and of the conv): q | k | v.
        self.in_proj_qkv = nn.Linear(hidden, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.conv1d = nn.Conv1d(
            conv_dim, conv_dim, config.linear_conv_kernel_dim, groups=conv_dim, bias=False
        )
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, hidden, bias=False)
        self.conv_dim = conv_dim
        self.fused_in_proj: torch.Tensor | None = None  # set by `fuse_weights`
        # Set by `fuse_weights` for a GGUF out projection whose input columns are stored by V head in another order:
        # the norm writes its heads in that order, so the projection needs no gather of its input.
        self.out_in_stored_order: tuple[torch.Tensor, QuantizedWeight] | None = None

    def fuse_weights(self) -> None:
        """The four input projections as one GEMM: [qkv | z | b | a]; the out projection's input order folded
        into the norm before it."""
        self.fused_in_proj = fuse_linear_weights(
            self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a
        )
        out = self.out_proj.weight
        if isinstance(out, QuantizedWeight):
            self.out_in_stored_order = out.input_groups(self.head_v_dim)

    def mixer_weights(self) -> MixerWeights:
        in_proj = require_fused(self.fused_in_proj, self)
        conv_weight = self.conv1d.weight.view(self.conv_dim, -1)
        out_rows, out_proj = None, self.out_proj.weight
        if self.out_in_stored_order is not None:
            out_rows, out_proj = self.out_in_stored_order
        return MixerWeights(
            in_proj, conv_weight, self.A_log, self.dt_bias, self.norm.weight, out_proj, out_rows
        )

    def mixer_dims(self) -> MixerDims:
        return MixerDims(self.num_k_heads, self.num_v_heads, self.head_k_dim, self.head_v_dim, self.norm.eps)

    def decode_states(self, batch: ForwardBatch, cache: Cache) -> DecodeStates:
        """Views of the batch's rows when its slots are consecutive (an eager batch), else the whole per-slot
        caches and the slots to touch."""
        conv_cache, state_cache = cache.conv[self.cache_index], cache.recurrent[self.cache_index]
        if batch.slot_range is not None:
            return DecodeStates(batch.select(conv_cache), batch.select(state_cache), None)
        return DecodeStates(conv_cache, state_cache, batch.slots)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, cache: Cache) -> torch.Tensor:
        if batch.is_decode:
            return deltanet_decode(
                x, self.mixer_weights(), self.decode_states(batch, cache), self.mixer_dims()
            )

        conv_cache = cache.conv[self.cache_index]
        state_cache = cache.recurrent[self.cache_index]
        conv_state = batch.select(conv_cache)
        state = batch.select(state_cache)
        tokens = x.shape[0]
        w, dims = self.mixer_weights(), self.mixer_dims()
        qkv, z, b, a = _split_in_proj(linear(x, w.in_proj), dims)
        beta, g = deltanet_gates(a, b, w.A_log, w.dt_bias)
        mixed, new_conv_state = causal_conv1d(
            qkv[None], w.conv_weight, conv_state=conv_state, cu_seqlens=batch.cu_seqlens
        )
        q, k, v = _split_heads(mixed[0], dims)
        o, new_state = chunk_gated_delta_rule(
            q[None],
            k[None],
            v[None],
            g[None],
            beta[None],
            initial_state=state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=batch.cu_seqlens,
        )
        batch.write_back(conv_cache, new_conv_state)
        batch.write_back(state_cache, new_state)
        z = z.reshape(tokens, self.num_v_heads, self.head_v_dim)
        o = self.norm(o[0], z, w.out_rows).reshape(tokens, self.value_dim)
        return linear(o, w.out_proj)


def _split_in_proj(projected: torch.Tensor, dims: MixerDims) -> tuple[torch.Tensor, ...]:
    """The fused input projection's output -> qkv (conv channels q | k | v), z, b, a."""
    conv_dim = 2 * dims.heads_k * dims.dim_k + dims.heads_v * dims.dim_v
    return projected.split([conv_dim, dims.heads_v * dims.dim_v, dims.heads_v, dims.heads_v], dim=-1)


def _split_heads(mixed: torch.Tensor, dims: MixerDims) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The conv output [T, conv_dim] -> q, k [T, H, K] and v [T, HV, V]."""
    tokens = mixed.shape[0]
    key_width = dims.heads_k * dims.dim_k
    q, k, v = mixed.split([key_width, key_width, dims.heads_v * dims.dim_v], dim=-1)
    return (
        q.reshape(tokens, dims.heads_k, dims.dim_k),
        k.reshape(tokens, dims.heads_k, dims.dim_k),
        v.reshape(tokens, dims.heads_v, dims.dim_v),
    )


def deltanet_decode(x: torch.Tensor, w: MixerWeights, states: DecodeStates, dims: MixerDims) -> torch.Tensor:
    """One token of every sequence through the layer: x [B, hidden] -> [B, hidden]. The conv state [B, conv_dim,
    width] and the fp32 recurrent state [B, HV, K, V] are updated in place, or with `states.slot_ids` [B] the
    whole per-slot caches at those rows. Tensors, numbers and tuples of them only (no module), so one
    `torch.compile` graph serves every DeltaNet layer (see `engine/models/decode_regions.py`)."""
    tokens = x.shape[0]
    qkv, z, b, a = _split_in_proj(linear(x, w.in_proj), dims)
    mixed = causal_conv1d_update(qkv, w.conv_weight, states.conv, states.slot_ids)  # [B, conv_dim]
    q, k, v = _split_heads(mixed, dims)
    o = gated_delta_rule_decode(q, k, v, a, b, w.A_log, w.dt_bias, states.recurrent, states.slot_ids)
    o = gated_rms_norm(o, z.reshape(tokens, dims.heads_v, dims.dim_v), w.norm_weight, dims.eps, w.out_rows)
    return linear(o.reshape(tokens, dims.heads_v * dims.dim_v), w.out_proj)
