"""Qwen3.5-MoE text model (Qwen3.5-35B-A3B, Qwen-AgentWorld-35B-A3B).

Parameter names mirror transformers' `Qwen3_5MoeForCausalLM`, so checkpoint keys map one to one after the
`model.language_model.` -> `model.` prefix change."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.cache import Cache
from engine.config import FULL_ATTENTION, Config
from engine.forward_batch import ForwardBatch
from engine.layers.attention import GatedAttention
from engine.layers.gated_deltanet import GatedDeltaNet
from engine.layers.linear import linear
from engine.layers.moe import SparseMoeBlock
from engine.layers.norms import RMSNorm
from engine.layers.rotary import RotaryEmbedding
from engine.models.decode_regions import DecodeRegions, RegionsUnavailable
from engine.quant.weight import QuantizedWeight


class DecoderLayer(nn.Module):
    """Pre-norm: h = x + mixer(norm(x)); y = h + moe(norm(h))."""

    decode_region: DecodeRegions | None = None  # set by `Qwen3_5MoeForCausalLM.compile_decode`

    def __init__(self, config: Config, layer_type: str, cache_index: int) -> None:
        super().__init__()
        self.is_full_attention = layer_type == FULL_ATTENTION
        if self.is_full_attention:
            self.self_attn = GatedAttention(config, cache_index)
        else:
            self.linear_attn = GatedDeltaNet(config, cache_index)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SparseMoeBlock(config)

    def forward(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        cache: Cache,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        regions = self.decode_region
        if regions is not None and batch.is_decode and regions.takes(hidden):
            try:
                return self._decode_compiled(regions, hidden, residual, rope, batch, cache)
            except RegionsUnavailable:
                pass  # nothing was written yet (or only idempotent KV writes): run this layer eagerly
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        if self.is_full_attention:
            hidden = self.self_attn(hidden, rope, batch, cache)
        else:
            hidden = self.linear_attn(hidden, batch, cache)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual

    def _decode_compiled(
        self,
        regions: DecodeRegions,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        cache: Cache,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same function as `forward`, through the compiled regions (the first layer's residual is zero)."""
        residual = torch.zeros_like(hidden) if residual is None else residual
        eps = self.input_layernorm.eps
        moe_args = (self.mlp.moe_weights(), self.mlp.moe_dims())
        if self.is_full_attention:
            # Attention stays eager: its KV span grows every step, a new shape for a compiled graph each time.
            hidden, residual = self.input_layernorm(hidden, residual)
            hidden = self.self_attn(hidden, rope, batch, cache)
            return regions.moe_tail(hidden, residual, self.post_attention_layernorm.weight, eps, *moe_args)
        mixer = self.linear_attn
        return regions.deltanet_layer(
            hidden,
            residual,
            (self.input_layernorm.weight, self.post_attention_layernorm.weight),
            eps,
            mixer.mixer_weights(),
            mixer.mixer_dims(),
            mixer.decode_states(batch, cache),
            *moe_args,
        )


def embed(input_ids: torch.Tensor, table: torch.Tensor | QuantizedWeight) -> torch.Tensor:
    """Embedding rows; a GGUF table kept in its blocks dequantizes only the rows asked for."""
    if isinstance(table, QuantizedWeight):
        return table.rows_of(input_ids)
    return F.embedding(input_ids, table)


class TextModel(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        layers, full_seen, linear_seen = [], 0, 0
        for layer_type in config.layer_types:
            if layer_type == FULL_ATTENTION:
                layers.append(DecoderLayer(config, layer_type, full_seen))
                full_seen += 1
            else:
                layers.append(DecoderLayer(config, layer_type, linear_seen))
                linear_seen += 1
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.rotary_dim, config.rope_theta)

    def forward(self, input_ids: torch.Tensor, batch: ForwardBatch, cache: Cache) -> torch.Tensor:
        hidden = embed(input_ids, self.embed_tokens.weight)
        rope = self.rotary.cos_sin(batch.positions, hidden.dtype)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, rope, batch, cache)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class Qwen3_5MoeForCausalLM(nn.Module):
    decode_regions: DecodeRegions | None = None  # set by `compile_decode`

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = TextModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def fuse_weights(self) -> None:
        """Fuse the projections that share an input (after loading; the parameters become views)."""
        for module in self.modules():
            if module is not self and hasattr(module, "fuse_weights"):
                module.fuse_weights()

    @property
    def is_quantized(self) -> bool:
        """Some weights are kept in GGUF blocks (see `engine/quant/weight.py`)."""
        return any(isinstance(v, QuantizedWeight) for m in self.modules() for v in vars(m).values())

    def compile_decode(self) -> None:
        """CPU decode batches (up to 2 * experts / top_k tokens) run through `DecodeRegions`. Not for GGUF weights
        kept in blocks: the regions' gathered experts read dense expert stacks."""
        if self.is_quantized:
            return
        config = self.config
        regions = DecodeRegions(max_tokens=max(1, 2 * config.num_experts // config.num_experts_per_tok))
        for layer in self.model.layers:
            layer.decode_region = regions
        self.decode_regions = regions

    @torch.inference_mode()
    def forward(
        self, input_ids: torch.Tensor, batch: ForwardBatch, cache: Cache, all_logits: bool = False
    ) -> torch.Tensor:
        """input_ids [T] packed as described by `batch`. Returns fp32 logits of every token ([T, vocab]) when
        `all_logits`, else of each sequence's last token ([N, vocab])."""
        hidden = self.model(input_ids, batch, cache)
        if not all_logits and not batch.is_decode:
            hidden = hidden[batch.cu_seqlens[1:] - 1]
        regions = self.decode_regions
        if regions is not None and batch.is_decode and hidden.shape[0] == 1 and regions.takes(hidden):
            try:
                return regions.one_row_logits(hidden, self.lm_head.weight)
            except RegionsUnavailable:
                pass
        return linear(hidden, self.lm_head.weight).float()

    @torch.inference_mode()
    def decode_step(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor, cache: Cache
    ) -> torch.Tensor:
        """One decode token per sequence, capture-safe (no host sync, no value-dependent shapes): input_ids,
        positions, slot_ids [B] int64 on the model's device -> fp32 logits [B, vocab]. The same function as the
        eager decode step; this is the step `DecodeGraphRunner` captures."""
        batch = ForwardBatch.static_decode(positions, slot_ids, cache.max_len)
        return self.forward(input_ids, batch, cache)
