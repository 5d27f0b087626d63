"""A tiny random Qwen3.5-MoE checkpoint in the official layout: `--model tiny` (try the engine without weights), the
tests and the benchmarks.

The weights come from transformers' own `Qwen3_5MoeForCausalLM` (so it is the reference for parity tests), every
parameter perturbed so that each formula matters (zero-centred norms, A_log, dt_bias, ...). The tokenizer is a
small byte-level BPE trained here with the `tokenizers` library, with the Qwen chat special tokens and a ChatML
chat template that honours `enable_thinking`. Its answers are random text: it shows that the engine loads, batches,
constrains and streams, nothing about the world model.

`--model tiny` (aw-mcp serve/call/shell --backend local, aw-mcp engine serve) builds it once into the user's cache
(`tiny_model_path()`, a few seconds) and loads it from there. In a checkout or the wheel alike this module ships
with the engine; `engine/testing/tiny_checkpoint.py` (the tests' name for it) imports it.

    python -m engine.tiny_model OUT [--multimodal] [--per-expert] [--sharded] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]
# The Qwen3.5 pre-tokenizer split (transformers rebuilds it in code for this model type, so it must match).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- set content = message['content'] -%}"
    "{%- if message['role'] == 'assistant' and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}"
    "{{- '<think>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)
_CORPUS = [
    "The world model simulates tools: it reads an action and answers with the observation.",
    "Environment Observation: the file was created. The directory now holds 3 files.",
    'Action: {"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}',
    "Let me think about what the tool would return. The user asked for the weather in Paris.",
    "Sunny, 24 degrees. Wind from the west at 10 km/h. Humidity 40 percent.",
    "def main():\n    print('hello world')\n    return 0\n",
    "Error: permission denied. The command exited with status 1.",
    "### Turn 1\n**Action:**\nsearch the web for the latest release notes",
]

TINY_TEXT_CONFIG: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    hidden_act="silu",
    max_position_embeddings=32768,  # room for the bundled worlds' prompts (~22k tokens for mcp_crm)
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    full_attention_interval=4,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10_000_000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [2, 1, 1],
        "mrope_interleaved": True,
    },
    attn_output_gate=True,
    mamba_ssm_dtype="float32",
    mtp_num_hidden_layers=1,
)
_TINY_VISION_CONFIG = dict(
    depth=1,
    hidden_size=32,
    intermediate_size=64,
    num_heads=2,
    out_hidden_size=64,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=64,
)


def build_tokenizer(extra_corpus: list[str] | None = None, vocab_size: int = 300):
    """A byte-level BPE with Qwen's pre-tokenizer, chat special tokens and `<think>` / `</think>`."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS + (extra_corpus or []), trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return tokenizer


def save_tokenizer(tokenizer, path: Path) -> None:
    """tokenizer.json, tokenizer_config.json and the chat template, as `AutoTokenizer` loads them."""
    tokenizer.save(str(path / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 4096,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "bos_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (path / "chat_template.jinja").write_text(CHAT_TEMPLATE)


def _perturb(model: torch.nn.Module, seed: int) -> None:
    """Random weights of a useful scale, and non-default norms, A_log and dt_bias so every formula matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("A_log"):
                param.copy_(torch.rand(param.shape, generator=generator).mul(16).add(0.01).log())
            elif "norm" in name or name.endswith("dt_bias"):
                param.add_(0.3 * noise)
            else:
                param.copy_(0.1 * noise)


def _layout(state: dict[str, torch.Tensor], multimodal: bool, per_expert: bool) -> dict[str, torch.Tensor]:
    """Text-model state dict -> checkpoint keys (prefix and expert layout)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        name = (
            key.replace("model.", "model.language_model.", 1)
            if multimodal and key.startswith("model.")
            else key
        )
        if per_expert and name.endswith("mlp.experts.gate_up_proj"):
            inter = value.shape[1] // 2
            for e in range(value.shape[0]):
                out[name.replace("gate_up_proj", f"{e}.gate_proj.weight")] = value[e, :inter].clone()
                out[name.replace("gate_up_proj", f"{e}.up_proj.weight")] = value[e, inter:].clone()
        elif per_expert and name.endswith("mlp.experts.down_proj"):
            for e in range(value.shape[0]):
                out[name.replace("down_proj", f"{e}.down_proj.weight")] = value[e].clone()
        else:
            out[name] = value.clone().contiguous()
    return out


def _save_weights(tensors: dict[str, torch.Tensor], path: Path, sharded: bool) -> None:
    from safetensors.torch import save_file

    if not sharded:
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        return
    keys = sorted(tensors)
    shards = [keys[i::3] for i in range(3)]
    weight_map = {}
    for i, shard_keys in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: tensors[k] for k in shard_keys}, str(path / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard_keys, name))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def make_tiny_checkpoint(
    path: str | Path,
    *,
    seed: int = 0,
    multimodal: bool = False,
    per_expert_layout: bool = False,
    sharded: bool = False,
    dtype: str = "float32",
    **config_overrides: Any,
) -> Path:
    """Write config.json, weights and tokenizer files of a tiny random model to `path`; returns the path.

    `config_overrides` replace entries of the text config (e.g. num_hidden_layers=8, num_experts=4)."""
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer_size = tokenizer.get_vocab_size(with_added_tokens=True)
    text_kwargs = {**TINY_TEXT_CONFIG, **config_overrides}
    # Like the real checkpoint, pad the embedding past the tokenizer (248320 rows for 248077 tokens).
    text_kwargs.setdefault("vocab_size", (tokenizer_size // 64 + 1) * 64)
    im_end = tokenizer.token_to_id("<|im_end|>")
    text_kwargs.setdefault("eos_token_id", tokenizer.token_to_id("<|endoftext|>"))
    text_config = Qwen3_5MoeTextConfig(**text_kwargs)
    torch.manual_seed(seed)
    model = Qwen3_5MoeForCausalLM(text_config).eval()
    _perturb(model, seed)
    torch_dtype = getattr(torch, dtype)
    state = {k: v.to(torch_dtype) for k, v in model.state_dict().items()}
    if text_config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    tensors = _layout(state, multimodal, per_expert_layout)
    # Extras the engine must skip: the MTP head (in every official checkpoint) and, for the wrapper, the vision tower.
    tensors["mtp.fc.weight"] = torch.zeros(4, 4, dtype=torch_dtype)
    if multimodal:
        config = Qwen3_5MoeConfig(
            text_config=text_kwargs, vision_config=_TINY_VISION_CONFIG, tie_word_embeddings=False
        )
        config.architectures = ["Qwen3_5MoeForConditionalGeneration"]
        tensors.update(_vision_tensors(config, torch_dtype))
    else:
        config = text_config
        config.architectures = ["Qwen3_5MoeForCausalLM"]
    config_dict = config.to_dict()
    config_dict["dtype"] = dtype
    if multimodal:
        config_dict["text_config"]["dtype"] = dtype
    config_dict["eos_token_id"] = im_end if not multimodal else config_dict.get("eos_token_id")
    (out / "config.json").write_text(json.dumps(config_dict, indent=2, default=str))
    _save_weights(tensors, out, sharded)
    save_tokenizer(tokenizer, out)
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [im_end, tokenizer.token_to_id("<|endoftext|>")], "do_sample": False})
    )
    return out


def _vision_tensors(config, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeVisionModel

    vision = Qwen3_5MoeVisionModel._from_config(config.vision_config)
    return {f"model.visual.{k}": v.to(dtype).contiguous() for k, v in vision.state_dict().items()}


# --- `--model tiny` ------------------------------------------------------------------------------------------------

TINY_MODEL = "tiny"
# Bumped when the maker's output changes, so a cache built by an older version is not reused.
TINY_MODEL_VERSION = 1
TINY_MODEL_SEED = 0
TINY_NOTICE = (
    "answered by --model tiny, a tiny random model built without weights: random text, not the world model "
    "(it shows the engine runs; see docs/serving.md for the real model)"
)


def is_tiny_model(model: str | os.PathLike[str] | None) -> bool:
    return str(model) == TINY_MODEL


def tiny_model_path(cache: Path | None = None) -> Path:
    """The tiny random checkpoint `--model tiny` names, built on first use into `cache` (default: the user's cache
    folder, `$XDG_CACHE_HOME/aw-mcp` or `~/.cache/aw-mcp`). Built in a temporary folder beside it and renamed into
    place, so two processes starting at once never load half a checkpoint."""
    root = cache or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "aw-mcp"
    target = root / f"tiny-model-v{TINY_MODEL_VERSION}"
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".tiny-model-", dir=root))
    try:
        make_tiny_checkpoint(building, seed=TINY_MODEL_SEED)
        try:
            building.rename(target)
        except OSError:  # another process got there first: theirs is as good
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def resolve_tiny_model(model: str) -> str:
    """`model`, or for `tiny` the folder of the tiny random checkpoint (built on first use)."""
    return str(tiny_model_path()) if is_tiny_model(model) else model


def main(argv: list[str] | None = None, prog: str = "python -m engine.tiny_model") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--multimodal", action="store_true", help="the official wrapper layout")
    parser.add_argument("--per-expert", action="store_true", help="experts.E.{gate,up,down}_proj.weight keys")
    parser.add_argument(
        "--sharded", action="store_true", help="several shards + model.safetensors.index.json"
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    path = make_tiny_checkpoint(
        args.out,
        seed=args.seed,
        multimodal=args.multimodal,
        per_expert_layout=args.per_expert,
        sharded=args.sharded,
        dtype=args.dtype,
    )
    print(path, file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
