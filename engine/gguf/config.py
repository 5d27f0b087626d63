"""The engine's `Config` from a GGUF's `qwen35moe.*` metadata (llama.cpp's key names; no config.json needed)."""

from __future__ import annotations

from typing import Any

from engine.config import FULL_ATTENTION, LINEAR_ATTENTION, Config, layer_types_from_interval
from engine.loader import CheckpointError


def config_from_metadata(metadata: dict[str, Any], vocab_rows: int | None = None) -> Config:
    """`vocab_rows`: the embedding's row count (the real model pads it past the tokenizer: 248320 rows)."""
    arch = str(metadata.get("general.architecture"))

    def get(key: str, default: Any = None) -> Any:
        value = metadata.get(f"{arch}.{key}", default)
        if value is None:
            raise CheckpointError(f"the GGUF metadata lack {arch}.{key}, which a {arch} model needs")
        if isinstance(value, list) and key != "attention.recurrent_layers":
            if len(set(value)) != 1:  # llama.cpp allows per-layer arrays; this model has one value per key
                raise CheckpointError(
                    f"{arch}.{key} varies per layer ({value[:8]}...), which the engine does not run"
                )
            value = value[0]
        return value

    hidden = int(get("embedding_length"))
    num_layers = int(get("block_count")) - int(metadata.get(f"{arch}.nextn_predict_layers", 0) or 0)
    heads = int(get("attention.head_count"))
    head_dim = int(get("attention.key_length", hidden // heads))
    linear_k_heads = int(get("ssm.group_count"))
    linear_v_heads = int(get("ssm.time_step_rank"))
    linear_k_dim = int(get("ssm.state_size"))
    linear_v_dim = int(get("ssm.inner_size")) // linear_v_heads
    recurrent = metadata.get(f"{arch}.attention.recurrent_layers")
    if recurrent is not None:
        layer_types = [LINEAR_ATTENTION if r else FULL_ATTENTION for r in list(recurrent)[:num_layers]]
    else:
        layer_types = layer_types_from_interval(num_layers, int(get("full_attention_interval", 4)))
    rotary_dim = int(get("rope.dimension_count", head_dim // 4))
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    eos = metadata.get("tokenizer.ggml.eos_token_id")
    return Config(
        vocab_size=int(vocab_rows or get("vocab_size", len(tokens))),
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=int(get("attention.head_count_kv")),
        head_dim=head_dim,
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        max_position_embeddings=int(get("context_length")),
        tie_word_embeddings=False,  # decided by the loader from the tensors present
        rope_theta=float(get("rope.freq_base", 10_000_000.0)),
        partial_rotary_factor=rotary_dim / head_dim,
        linear_conv_kernel_dim=int(get("ssm.conv_kernel")),
        linear_key_head_dim=linear_k_dim,
        linear_value_head_dim=linear_v_dim,
        linear_num_key_heads=linear_k_heads,
        linear_num_value_heads=linear_v_heads,
        num_experts=int(get("expert_count")),
        num_experts_per_tok=int(get("expert_used_count")),
        moe_intermediate_size=int(get("expert_feed_forward_length")),
        shared_expert_intermediate_size=int(get("expert_shared_feed_forward_length")),
        layer_types=layer_types,
        eos_token_ids=[] if eos is None else [int(eos)],
        dtype="bfloat16",
    )
