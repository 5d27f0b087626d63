"""One entry for both checkpoint formats: a safetensors folder or hub id (the bf16 release), or a GGUF file or
`owner/repo:TYPE` (llama.cpp's quantized files, weights kept in their blocks); `tiny` names the tiny random
checkpoint (engine/tiny_model.py). Returns the built model, its
config, tokenizer and recommended sampling settings: what `LLM` starts an engine over."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.config import Config
from engine.generation_config import SamplingDefaults, from_generation_config, from_gguf_metadata
from engine.gguf.config import config_from_metadata
from engine.gguf.hub import is_gguf_source, resolve_gguf
from engine.gguf.loader import build_gguf_model
from engine.gguf.reader import open_checkpoint
from engine.gguf.tokenizer import tokenizer_from_metadata
from engine.loader import build_model, resolve_model_path
from engine.tiny_model import resolve_tiny_model


@dataclass
class LoadedCheckpoint:
    path: Path
    config: Config
    model: torch.nn.Module
    tokenizer: object
    dtype: torch.dtype
    file_tensor_bytes: int | None = None  # a GGUF's tensor bytes as stored in the file
    skipped_mtp_tensors: int = 0
    # generation_config.json's sampling fields, or a GGUF's general.sampling.* (engine/generation_config.py)
    sampling_defaults: SamplingDefaults = field(default_factory=SamplingDefaults)


def load_checkpoint(
    model: str,
    device: torch.device,
    choose_dtype: Callable[[Config], torch.dtype],
    *,
    tokenizer: str | None = None,
    hf_compat_dtypes: bool = False,
    progress: bool = True,
) -> LoadedCheckpoint:
    """`choose_dtype(config)`: the compute dtype, decided once the config is read. `tokenizer`: a folder or hub id
    whose HF tokenizer replaces the checkpoint's own."""
    from transformers import AutoTokenizer

    model = resolve_tiny_model(model)  # `tiny`: the tiny random checkpoint, built on first use
    if is_gguf_source(model):
        path = resolve_gguf(model)
        gguf = open_checkpoint(path)
        embed = gguf.tensors.get("token_embd.weight")
        config = config_from_metadata(gguf.metadata, vocab_rows=embed.shape[0] if embed else None)
        sampling = from_gguf_metadata(gguf.metadata, path.name)
        dtype = choose_dtype(config)
        module, report = build_gguf_model(gguf, config, device, dtype, progress)
        tok = (
            AutoTokenizer.from_pretrained(tokenizer) if tokenizer else tokenizer_from_metadata(gguf.metadata)
        )
        return LoadedCheckpoint(
            path, config, module, tok, dtype, gguf.tensor_bytes, report.skipped_mtp, sampling
        )
    path = resolve_model_path(model)
    config = Config.from_pretrained(path)
    sampling = from_generation_config(path)  # before the weights: a broken file fails fast
    dtype = choose_dtype(config)
    module = build_model(config, path, device, dtype, hf_compat_dtypes, progress)
    tok = AutoTokenizer.from_pretrained(tokenizer or str(path))
    return LoadedCheckpoint(path, config, module, tok, dtype, sampling_defaults=sampling)
