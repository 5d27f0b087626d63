"""Model settings read from a checkpoint's config.json (text-only, or the multimodal wrapper's `text_config`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LINEAR_ATTENTION = "linear_attention"
FULL_ATTENTION = "full_attention"


@dataclass
class Config:
    vocab_size: int = 248320
    hidden_size: int = 2048
    num_hidden_layers: int = 40
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 262144
    tie_word_embeddings: bool = False
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    layer_types: list[str] = field(default_factory=list)
    eos_token_ids: list[int] = field(default_factory=list)
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if not self.layer_types:
            self.layer_types = layer_types_from_interval(self.num_hidden_layers, 4)
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"config has {len(self.layer_types)} layer_types for {self.num_hidden_layers} layers"
            )
        unknown = set(self.layer_types) - {LINEAR_ATTENTION, FULL_ATTENTION}
        if unknown:
            raise ValueError(f"unknown layer types in config: {sorted(unknown)}")

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Config:
        """Accepts the multimodal wrapper (settings under `text_config`) and a plain text config."""
        text = dict(raw.get("text_config") or raw)
        rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
        num_layers = int(text.get("num_hidden_layers", cls.num_hidden_layers))
        layer_types = text.get("layer_types") or layer_types_from_interval(
            num_layers, int(text.get("full_attention_interval", 4))
        )
        eos = text.get("eos_token_id", raw.get("eos_token_id"))
        eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        names = {f for f in cls.__dataclass_fields__}
        simple = {k: v for k, v in text.items() if k in names and k not in ("layer_types", "dtype")}
        return cls(
            **simple,
            rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 10_000.0))),
            partial_rotary_factor=float(
                rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
            ),
            layer_types=list(layer_types),
            eos_token_ids=eos_ids,
            dtype=str(text.get("dtype") or text.get("torch_dtype") or raw.get("dtype") or "bfloat16"),
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Config:
        config_file = Path(path) / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"no config.json in {path}")
        return cls.from_dict(json.loads(config_file.read_text()))


def layer_types_from_interval(num_layers: int, interval: int) -> list[str]:
    """Every `interval`-th layer (1-based) is full attention, the rest Gated DeltaNet: LLLF LLLF ..."""
    return [FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers)]
