"""The tensor table of a GGUF file of the real model without the file: every tensor's name, shape and type as
llama.cpp's quantizer picks them (`src/llama-quant.cpp`, Q4_K_M: attn_qkv Q5_K, output Q6_K, attn_v and
ffn_down* Q6_K on the `use_more_bits` layers, norms / conv / router / 1-D tensors kept F32, the rest Q4_K), and
random blocks of those types. What the memory plan's 24 GiB check and `bench/gpu_check.py`'s real-shape GGUF rows
run on, since no weights can be downloaded here."""

from __future__ import annotations

import numpy as np
import torch

from engine.config import FULL_ATTENTION, Config
from engine.gguf.reader import GGUFCheckpoint, GGUFTensor
from engine.quant.formats import FORMATS, GGMLType, row_bytes


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


def random_blocks(
    shape: tuple[int, ...], kind: GGMLType, device: torch.device | str = "cpu", seed: int = 0
) -> torch.Tensor:
    """Random weights of `kind` in torch-order `shape` (uint8 blocks for quantized kinds): random bytes with every
    block's scale fields set to small finite values, so the weights are O(0.01..0.1) as real ones are."""
    gen = torch.Generator(device=device).manual_seed(seed)
    if kind in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
        dtype = {GGMLType.F32: torch.float32, GGMLType.F16: torch.float16, GGMLType.BF16: torch.bfloat16}[
            kind
        ]
        return (torch.randn(shape, generator=gen, device=device) * 0.05).to(dtype)
    block, size = FORMATS[kind]
    rows = shape[:-1]
    blocks = torch.randint(
        0, 256, (*rows, shape[-1] // block, size), generator=gen, dtype=torch.uint8, device=device
    )
    for offset, scale in _SCALE_FIELDS[kind]:
        value = torch.full(blocks.shape[:-1], scale, dtype=torch.float16, device=device)
        blocks[..., offset : offset + 2] = (
            value.unsqueeze(-1).view(torch.uint8).reshape(*blocks.shape[:-1], 2)
        )
    if kind == GGMLType.MXFP4:
        blocks[..., 0] = 121  # e8m0 exponent: 2^(121-127) / 2 scale, weights up to 6 * 2^-7
    return blocks.reshape(*rows, -1)


# (byte offset, fp16 value) of each block's super-scale fields: Q8_0 d; Q4_K/Q5_K d, dmin; Q6_K d (at the end);
# IQ4_XS d. Chosen so that a block's weights come out O(0.05).
_SCALE_FIELDS = {
    GGMLType.Q8_0: [(0, 0.0005)],
    GGMLType.Q4_K: [(0, 0.0004), (2, 0.0003)],
    GGMLType.Q5_K: [(0, 0.0002), (2, 0.0002)],
    GGMLType.Q6_K: [(208, 0.0001)],
    GGMLType.IQ4_XS: [(0, 0.0002)],
    GGMLType.MXFP4: [],
}


def random_checkpoint(
    config: Config, table: dict[str, tuple[GGMLType, tuple[int, ...]]], device: torch.device | str = "cpu"
) -> GGUFCheckpoint:
    """A checkpoint of random tensors of the table's types, made on `device` (not read from a file): fed to the
    same `build_gguf_model` a file goes through. `ssm_a` holds -exp(A_log) < 0, as the converter writes it."""
    tensors = {}
    for i, (name, (kind, shape)) in enumerate(sorted(table.items())):
        data = random_blocks(shape, kind, device, seed=i)
        if name.endswith("ssm_a"):
            data = -torch.rand(shape, device=device).mul(16).add(0.01)
        elif name.endswith("norm.weight"):
            data = data.float() + 1.0
        tensors[name] = GGUFTensor(name, kind, shape, data, file=None)  # type: ignore[arg-type]
    return GGUFCheckpoint([], {"general.architecture": "qwen35moe"}, tensors)
