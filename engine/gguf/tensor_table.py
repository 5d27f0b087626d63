"""The tensor table of a GGUF file of the real model without the file: every tensor's name, shape and type as
llama.cpp's quantizer picks them (`src/llama-quant.cpp`, Q4_K_M: attn_qkv Q5_K, output Q6_K, attn_v and
ffn_down* Q6_K on the `use_more_bits` layers, norms / conv / router / 1-D tensors kept F32, the rest Q4_K). The
random GGUF models of the tests (`engine/testing/quant_recipe.py`) and the ahead-of-time compile check
(`engine/kernels/aot`) are built from it."""

from __future__ import annotations

import numpy as np

from engine.config import FULL_ATTENTION, Config
from engine.quant.formats import GGMLType, row_bytes


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's choice of the layers that get more bits: the first and last eighth, and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_table(config: Config) -> dict[str, tuple[GGMLType, tuple[int, ...]]]:
    """GGUF tensor name -> (type, torch-order shape) for a Q4_K_M file of a model with this config."""
    c, q4, f32 = config, GGMLType.Q4_K, GGMLType.F32
    h, n = c.hidden_size, c.num_hidden_layers
    table: dict[str, tuple[GGMLType, tuple[int, ...]]] = {
        "token_embd.weight": (q4, (c.vocab_size, h)),
        "output_norm.weight": (f32, (h,)),
        "output.weight": (GGMLType.Q6_K, (c.vocab_size, h)),
    }
    full_layers = [i for i, t in enumerate(c.layer_types) if t == FULL_ATTENTION]
    for i, kind in enumerate(c.layer_types):
        p = f"blk.{i}."
        table[p + "attn_norm.weight"] = (f32, (h,))
        table[p + "post_attention_norm.weight"] = (f32, (h,))
        if kind == FULL_ATTENTION:
            q_rows, kv_rows = 2 * c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
            more = use_more_bits(full_layers.index(i), len(full_layers))
            table[p + "attn_q.weight"] = (q4, (q_rows, h))
            table[p + "attn_k.weight"] = (q4, (kv_rows, h))
            table[p + "attn_v.weight"] = (GGMLType.Q6_K if more else q4, (kv_rows, h))
            table[p + "attn_output.weight"] = (q4, (h, c.num_attention_heads * c.head_dim))
            table[p + "attn_q_norm.weight"] = (f32, (c.head_dim,))
            table[p + "attn_k_norm.weight"] = (f32, (c.head_dim,))
        else:
            v = c.linear_num_value_heads
            table[p + "attn_qkv.weight"] = (GGMLType.Q5_K, (c.linear_conv_dim, h))
            table[p + "attn_gate.weight"] = (q4, (c.linear_value_dim, h))
            table[p + "ssm_beta.weight"] = (q4, (v, h))
            table[p + "ssm_alpha.weight"] = (q4, (v, h))
            table[p + "ssm_a"] = (f32, (v,))
            table[p + "ssm_dt.bias"] = (f32, (v,))
            table[p + "ssm_conv1d.weight"] = (f32, (c.linear_conv_dim, c.linear_conv_kernel_dim))
            table[p + "ssm_norm.weight"] = (f32, (c.linear_value_head_dim,))
            table[p + "ssm_out.weight"] = (q4, (h, c.linear_value_dim))
        down = GGMLType.Q6_K if use_more_bits(i, n) else q4
        e, inter, shared = c.num_experts, c.moe_intermediate_size, c.shared_expert_intermediate_size
        table[p + "ffn_gate_inp.weight"] = (f32, (e, h))
        table[p + "ffn_gate_exps.weight"] = (q4, (e, inter, h))
        table[p + "ffn_up_exps.weight"] = (q4, (e, inter, h))
        table[p + "ffn_down_exps.weight"] = (down, (e, h, inter))
        table[p + "ffn_gate_inp_shexp.weight"] = (f32, (h,))
        table[p + "ffn_gate_shexp.weight"] = (q4, (shared, h))
        table[p + "ffn_up_shexp.weight"] = (q4, (shared, h))
        table[p + "ffn_down_shexp.weight"] = (down, (h, shared))
    return table


def table_bytes(table: dict[str, tuple[GGMLType, tuple[int, ...]]]) -> int:
    total = 0
    for kind, shape in table.values():
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        total += rows * row_bytes(kind, shape[-1])
    return total
