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
from engine.quant.formats import FLOAT_TYPES, FORMATS, GGMLType, row_bytes

_FLOAT_DTYPES = {GGMLType.F32: torch.float32, GGMLType.F16: torch.float16, GGMLType.BF16: torch.bfloat16}


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


# Typical |weight| per unit of the fp16 super-scale d (quant x sub-scale ranges), so `magnitude` means the same for
# every type.
_PER_D = {
    GGMLType.Q8_0: 64,
    GGMLType.Q4_K: 256,
    GGMLType.Q5_K: 512,
    GGMLType.Q6_K: 1024,
    GGMLType.IQ4_XS: 1024,
}
# Byte offsets of the fp16 scale fields in each block (d; Q4_K/Q5_K also dmin).
_FP16_FIELDS = {
    GGMLType.Q8_0: (0,),
    GGMLType.Q4_K: (0, 2),
    GGMLType.Q5_K: (0, 2),
    GGMLType.Q6_K: (208,),
    GGMLType.IQ4_XS: (0,),
}


def random_blocks(
    kind: GGMLType,
    rows: int | tuple[int, ...],
    cols: int,
    magnitude: float = 1.0,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """uint8 [*rows, row_bytes(kind, cols)]: random bytes, with each fp16 scale field a random normal value making
    typical weights about `magnitude` (MXFP4: exponent bytes spread over 8 binades around it)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    lead = (rows,) if isinstance(rows, int) else tuple(rows)
    block_size, type_size = FORMATS[kind]
    count = int(np.prod(lead)) * (cols // block_size)
    blocks = torch.randint(0, 256, (count, type_size), dtype=torch.uint8, generator=gen, device=device)
    if kind == GGMLType.MXFP4:
        centre = int(np.log2(magnitude)) + 126  # 2^(e-128) times the doubled e2m1 values (typically ~4)
        blocks[:, 0] = torch.randint(
            centre - 4, centre + 4, (count,), dtype=torch.uint8, generator=gen, device=device
        )
    for start in _FP16_FIELDS.get(kind, ()):
        d = (torch.randn(count, generator=gen, device=device) * magnitude / _PER_D[kind]).half()
        blocks[:, start : start + 2] = d.view(torch.uint8).view(count, 2)
    return blocks.view(*lead, row_bytes(kind, cols))


def random_checkpoint(
    config: Config, table: dict[str, tuple[GGMLType, tuple[int, ...]]], device: torch.device | str = "cpu"
) -> GGUFCheckpoint:
    """A checkpoint of random tensors of the table's types, made on `device` (not read from a file): fed to the
    same `build_gguf_model` a file goes through. `ssm_a` holds -exp(A_log) < 0, as the converter writes it."""
    tensors = {}
    for i, (name, (kind, shape)) in enumerate(sorted(table.items())):
        if kind in FLOAT_TYPES:
            data = (torch.randn(shape, device=device) * 0.05).to(_FLOAT_DTYPES[kind])
        else:  # weights about 1/sqrt(fan-in), as trained ones are
            data = random_blocks(
                kind, shape[:-1], shape[-1], magnitude=shape[-1] ** -0.5, seed=i, device=device
            )
        if name.endswith("ssm_a"):
            data = -torch.rand(shape, device=device).mul(16).add(0.01)
        elif name.endswith("norm.weight"):
            data = data.float() + 1.0
        tensors[name] = GGUFTensor(name, kind, shape, data, file=None)  # type: ignore[arg-type]
    return GGUFCheckpoint([], {"general.architecture": "qwen35moe"}, tensors)
