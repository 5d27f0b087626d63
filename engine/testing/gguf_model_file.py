"""Write a whole qwen35moe GGUF file (metadata as llama.cpp's converter writes them, tensors, tokenizer) from an
engine `Config` and a tensor table, and its dequantized F32 twin: the same weights in two files, without
llama.cpp. Used by the GGUF tests (quantized path == dense path on the same weights) and `bench/gguf_cpu.py`."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.config import LINEAR_ATTENTION, Config
from engine.gguf.reader import GGUFCheckpoint
from engine.quant.formats import GGMLType
from engine.testing.quant_recipe import q4_k_m_table, random_checkpoint


def write_model_metadata(writer, config: Config) -> None:
    """The `qwen35moe.*` keys `engine.gguf.config` and llama.cpp's loader read."""
    c = config
    writer.add_block_count(c.num_hidden_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.moe_intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_key_length(c.head_dim)
    writer.add_value_length(c.head_dim)
    writer.add_rope_freq_base(c.rope_theta)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_expert_count(c.num_experts)
    writer.add_expert_used_count(c.num_experts_per_tok)
    writer.add_expert_feed_forward_length(c.moe_intermediate_size)
    writer.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    writer.add_ssm_conv_kernel(c.linear_conv_kernel_dim)
    writer.add_ssm_state_size(c.linear_key_head_dim)
    writer.add_ssm_group_count(c.linear_num_key_heads)
    writer.add_ssm_time_step_rank(c.linear_num_value_heads)
    writer.add_ssm_inner_size(c.linear_value_dim)
    # llama.cpp's key; gguf 0.19's writer has no helper for it yet
    writer.add_array("qwen35moe.attention.recurrent_layers", [t == LINEAR_ATTENTION for t in c.layer_types])
    writer.add_full_attention_interval(4)
    writer.add_rope_dimension_count(c.rotary_dim)
    writer.add_rope_dimension_sections([11, 11, 10, 0])


def write_model_gguf(
    path: Path, config: Config, checkpoint: GGUFCheckpoint, tokenizer, dequantized: bool = False
) -> Path:
    """`checkpoint`: tensors in GGUF naming and storage convention (e.g. `random_checkpoint`). `dequantized`:
    write every quantized tensor as F32 (llama.cpp's dequantization, `gguf.quants.dequantize`)."""
    import gguf

    from engine.testing.gguf_writer import write_tokenizer_metadata

    writer = gguf.GGUFWriter(str(path), "qwen35moe")
    write_model_metadata(writer, config)
    write_tokenizer_metadata(writer, tokenizer, vocab_size=config.vocab_size)
    for name, tensor in sorted(checkpoint.tensors.items()):
        data = tensor.data.cpu() if isinstance(tensor.data, torch.Tensor) else torch.from_numpy(tensor.data)
        if tensor.kind in (GGMLType.F32, GGMLType.F16):
            writer.add_tensor(name, data.numpy())
        elif tensor.kind == GGMLType.BF16:
            writer.add_tensor(name, data.view(torch.uint16).numpy(), raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif dequantized:
            writer.add_tensor(
                name, gguf.quants.dequantize(data.numpy(), gguf.GGMLQuantizationType(int(tensor.kind)))
            )
        else:
            writer.add_tensor(name, data.numpy(), raw_dtype=gguf.GGMLQuantizationType(int(tensor.kind)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_random_pair(folder: Path, config: Config, tokenizer, seed: int = 0) -> tuple[Path, Path]:
    """A random Q4_K_M-recipe file of `config` and its dequantized F32 twin: `model-Q4_K_M.gguf`, `model-F32.gguf`."""
    torch.manual_seed(seed)
    checkpoint = random_checkpoint(config, q4_k_m_table(config))
    folder.mkdir(parents=True, exist_ok=True)
    quant = write_model_gguf(folder / "model-Q4_K_M.gguf", config, checkpoint, tokenizer)
    dense = write_model_gguf(folder / "model-F32.gguf", config, checkpoint, tokenizer, dequantized=True)
    return quant, dense


__all__ = ["write_model_gguf", "write_model_metadata", "write_random_pair"]
