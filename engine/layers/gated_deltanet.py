"""Gated DeltaNet: the linear-attention mixer of three layers out of four."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.cache import Cache
from engine.config import Config
from engine.forward_batch import ForwardBatch
from engine.kernels import (
    causal_conv1d,
    causal_conv1d_update,
    chunk_gated_delta_rule,
    fused_recurrent_gated_delta_rule,
)
from engine.layers.fused_linear import fuse_linear_weights
from engine.layers.norms import GatedRMSNorm


class GatedDeltaNet(nn.Module):
    def __init__(self, config: Config, cache_index: int) -> None:
        super().__init__()
        self.cache_index = cache_index  # which of the DeltaNet layers this is, in the cache
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = config.linear_key_dim
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

    def fuse_weights(self) -> None:
        """The four input projections as one GEMM: [qkv | z | b | a]."""
        self.fused_in_proj = fuse_linear_weights(
            self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a
        )

    def _in_proj(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.fused_in_proj is None:
            return self.in_proj_qkv(x), self.in_proj_z(x), self.in_proj_b(x), self.in_proj_a(x)
        heads = self.num_v_heads
        return F.linear(x, self.fused_in_proj).split([self.conv_dim, self.value_dim, heads, heads], dim=-1)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, cache: Cache) -> torch.Tensor:
        tokens = x.shape[0]
        qkv, z, b, a = self._in_proj(x)
        z = z.reshape(tokens, self.num_v_heads, self.head_v_dim)
        beta = torch.sigmoid(b)  # in the model dtype, as the reference does
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)

        conv_weight = self.conv1d.weight.view(self.conv1d.weight.shape[0], -1)
        conv_cache = cache.conv[self.cache_index]
        state_cache = cache.recurrent[self.cache_index]
        conv_state = batch.select(conv_cache)
        state = batch.select(state_cache)
        if batch.is_decode:
            mixed = causal_conv1d_update(
                qkv, conv_weight, conv_state
            )  # [N, conv_dim], state updated in place
            q, k, v = self._split_heads(mixed, tokens)
            o, _ = fused_recurrent_gated_delta_rule(
                q[:, None],
                k[:, None],
                v[:, None],
                g[:, None],
                beta[:, None],
                initial_state=state,
                use_qk_l2norm_in_kernel=True,
                inplace_final_state=True,
            )
            o = o[:, 0]
            batch.write_back(conv_cache, conv_state)
            batch.write_back(state_cache, state)
        else:
            mixed, new_conv_state = causal_conv1d(
                qkv[None], conv_weight, conv_state=conv_state, cu_seqlens=batch.cu_seqlens
            )
            q, k, v = self._split_heads(mixed[0], tokens)
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
            o = o[0]
            batch.write_back(conv_cache, new_conv_state)
            batch.write_back(state_cache, new_state)
        o = self.norm(o, z).reshape(tokens, self.value_dim)
        return self.out_proj(o)

    def _split_heads(
        self, mixed: torch.Tensor, tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return (
            q.reshape(tokens, self.num_k_heads, self.head_k_dim),
            k.reshape(tokens, self.num_k_heads, self.head_k_dim),
            v.reshape(tokens, self.num_v_heads, self.head_v_dim),
        )
