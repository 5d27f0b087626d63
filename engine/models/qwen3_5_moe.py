"""Qwen3.5-MoE text model (Qwen3.5-35B-A3B, Qwen-AgentWorld-35B-A3B).

Parameter names mirror transformers' `Qwen3_5MoeForCausalLM`, so checkpoint keys map one to one after the
`model.language_model.` -> `model.` prefix change."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from engine.cache import Cache
from engine.config import FULL_ATTENTION, Config
from engine.forward_batch import ForwardBatch
from engine.kernels import rms_norm
from engine.kernels.fused_moe.gathered import gathered_moe
from engine.layers.attention import GatedAttention
from engine.layers.gated_deltanet import GatedDeltaNet, deltanet_decode
from engine.layers.linear import linear
from engine.layers.moe import SparseMoeBlock, moe
from engine.layers.norms import RMSNorm
from engine.layers.rotary import RotaryEmbedding


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
            mixer.decode_weights(),
            mixer.decode_dims(),
            mixer.decode_states(batch, cache),
            *moe_args,
        )


def deltanet_layer_decode(
    hidden: torch.Tensor,
    residual: torch.Tensor,
    norms: tuple[torch.Tensor, torch.Tensor],
    eps: float,
    deltanet_weights: tuple[torch.Tensor, ...],
    deltanet_dims: tuple[int, int, int, int, float],
    deltanet_states: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    moe_weights: tuple[torch.Tensor, ...],
    moe_dims: tuple[int, int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole DeltaNet decoder layer for decode tokens: add + norm, mixer, add + norm, MoE (gathered experts)."""
    x, residual = rms_norm(hidden, norms[0], eps, residual=residual)
    hidden = deltanet_decode(x, *deltanet_weights, *deltanet_states, *deltanet_dims)
    return moe_tail_decode(hidden, residual, norms[1], eps, moe_weights, moe_dims)


def moe_tail_decode(
    hidden: torch.Tensor,
    residual: torch.Tensor,
    post_norm: torch.Tensor,
    eps: float,
    moe_weights: tuple[torch.Tensor, ...],
    moe_dims: tuple[int, int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's second half for decode tokens: add + norm, then the MoE with gathered experts."""
    x, residual = rms_norm(hidden, post_norm, eps, residual=residual)
    return moe(x, *moe_weights, *moe_dims, experts=gathered_moe), residual


def one_row_logits(hidden: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
    """Batch-1 logits as a broadcast multiply-sum: compiled, a GEMV split across threads that streams the vocab
    matrix about 1.6x faster than BLAS does for one row on a CPU (bench/engine_cpu.py's 32k x 512 head)."""
    return (hidden[:, None, :] * lm_head[None]).sum(-1).float()


T = TypeVar("T")


class RegionsUnavailable(RuntimeError):
    """A decode region could not be compiled (no C++ compiler, an Inductor failure): decode continues eagerly."""


class DecodeRegions:
    """CPU decode through two `torch.compile`d regions per layer type, shared by every layer.

    Why: a CPU decode step is hundreds of tiny ops (a [B, 512] norm, gates, a [B, H, 64, 64] state update), each
    costing 5-15 us of dispatch, more than its arithmetic; Inductor fuses a region into a few C++ loops, with the
    GEMMs still going to BLAS. The regions take tensors and numbers only, never a module, so every layer reuses
    one graph per batch size (compiled on first use, seconds each). Attention stays eager (its KV span changes
    every step), and so does anything past `max_tokens`, where gathered experts stop paying (see `gathered.py`)."""

    def __init__(self, max_tokens: int) -> None:
        import torch._dynamo

        self.max_tokens = max_tokens
        self.enabled = True
        # One graph per decode batch size and function: lift dynamo's default of 8 so no size falls back to eager.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * max_tokens + 8)
        self.deltanet_layer = self._guarded(torch.compile(deltanet_layer_decode, dynamic=False))
        self.moe_tail = self._guarded(torch.compile(moe_tail_decode, dynamic=False))
        self.one_row_logits = self._guarded(torch.compile(one_row_logits, dynamic=False))

    def takes(self, hidden: torch.Tensor) -> bool:
        return self.enabled and hidden.device.type == "cpu" and hidden.shape[0] <= self.max_tokens

    def _guarded(self, compiled: Callable[..., T]) -> Callable[..., T]:
        """The first failure turns every region off with a warning: decode stays correct, only slower."""

        def run(*args: object) -> T:
            try:
                return compiled(*args)
            except Exception as exc:  # noqa: BLE001 - any compile failure must leave a working (eager) engine
                self.enabled = False
                warnings.warn(
                    f"compiled CPU decode is off ({type(exc).__name__}: {str(exc)[:300]}); decoding eagerly",
                    RuntimeWarning,
                    stacklevel=2,
                )
                raise RegionsUnavailable(str(exc)) from exc

        return run


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
        hidden = self.embed_tokens(input_ids)
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

    def compile_decode(self) -> None:
        """CPU decode batches (up to 2 * experts / top_k tokens) run through `DecodeRegions`."""
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
