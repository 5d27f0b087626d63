"""Every option of an engine, in one dataclass: `LLM(model, **options)` takes them by keyword, `LLM.from_options`
whole, `aw-mcp engine serve` makes its flags from the fields that carry a `help` (engine/cli.py), and
`LLM.options` holds them as the engine resolved them for its device and checkpoint (the server reports its
context from there). The defaults that depend on the device are resolved here too."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from engine import settings
from engine.config import Config
from engine.loader import DEFAULT_MODEL

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def _flag(default: Any, help: str, **argparse_options: Any) -> Any:
    """A field that is also a command-line flag of `aw-mcp engine serve`."""
    return field(default=default, metadata={"help": help, **argparse_options})


@dataclass(frozen=True)
class EngineOptions:
    # -- loading ----------------------------------------------------------------------------------------------
    # A checkpoint folder, a hub id, a GGUF file (any part of a split set) or a GGUF hub form.
    model: str = _flag(
        DEFAULT_MODEL,
        "checkpoint folder or hub id, a GGUF file, a GGUF hub form like "
        "unsloth/Qwen-AgentWorld-35B-A3B-GGUF:Q4_K_M, or `tiny`: a tiny random model built without weights "
        "(random answers; to try the engine) (default: %(default)s)",
    )
    # An HF tokenizer (folder or hub id) to use instead of the checkpoint's own.
    tokenizer: str | None = _flag(None, "HF tokenizer folder or hub id (default: the checkpoint's own)")
    device: str | torch.device | None = _flag(None, "cuda, cuda:1, cpu (default: cuda when available)")
    # None/"auto": fp32 on a CPU (bf16 matmuls are slow there), the checkpoint's dtype on an accelerator.
    dtype: str | torch.dtype | None = _flag(
        None, "bfloat16, float16, float32 (default: bf16 on GPU, fp32 on CPU)"
    )
    hf_compat_dtypes: bool = _flag(
        False, "round A_log, dt_bias and the DeltaNet norm to the model dtype as transformers does"
    )
    progress: bool = True  # a progress bar while the weights load
    # -- serving ----------------------------------------------------------------------------------------------
    # Default: 32k (the bundled worlds' prompts, the CRM world's ~20k tokens, plus a long answer), capped by the
    # model's.
    max_model_len: int | None = _flag(
        None,
        "longest prompt + answer in tokens (default: 32768, or the checkpoint's own limit when smaller)",
        type=int,
    )
    # Cache slots, i.e. sequences decoding at once (more wait in order); fewer when the memory budget is short.
    max_num_seqs: int = _flag(8, "cache slots (concurrent sequences)", type=int)
    # Tokens per step: decodes first, then prompt chunks.
    max_num_batched_tokens: int | None = _flag(
        None,
        "tokens per engine step; long prompts are prefilled in chunks of this (default: 2048 GPU, 512 CPU)",
        type=int,
    )
    # The hybrid prefix cache (engine/prefix_cache.py) and its memory budget.
    enable_prefix_caching: bool = _flag(
        True, "reuse the cached state of a prompt's longest known prefix (default: on)"
    )
    prefix_cache_memory_gb: float | None = _flag(
        None,
        "memory for prefix snapshots (default: half the free GPU memory after the slots; 2 on a CPU)",
        type=float,
    )
    # As vLLM's flag: "auto" applies the checkpoint's recommended sampling settings (generation_config.json, or a
    # GGUF's general.sampling.* metadata) wherever a request leaves them unset; "vllm" applies none; a folder
    # applies its generation_config.json (engine/generation_config.py).
    generation_config: str | None = _flag(
        "auto",
        "sampling defaults for requests that leave them unset, as vLLM's flag: auto (the checkpoint's "
        "generation_config.json or GGUF general.sampling.* metadata), vllm (none), or a folder holding a "
        "generation_config.json (default: %(default)s)",
    )
    # The slots' budget (default: 85% of the free memory on a GPU, 4 GiB on a CPU).
    cache_memory_gb: float | None = None
    # Decode through the capture-safe step and CUDA graphs (default: on CUDA only; on a CPU the eager step is
    # faster, since it reads just the cached span and slot views without gathers).
    static_decode: bool | None = None
    # CPU only (default from `AW_COMPILE=1`): decode batches through `torch.compile`d per-layer regions
    # (engine/models/decode_regions.py), compiled on first use of each batch size (seconds each).
    compile_decode: bool | None = None

    # -- the command line -------------------------------------------------------------------------------------
    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        for option in fields(cls):
            if "help" not in option.metadata:
                continue
            kwargs = dict(option.metadata)
            if isinstance(option.default, bool):
                kwargs["action"] = argparse.BooleanOptionalAction if option.default else "store_true"
            parser.add_argument("--" + option.name.replace("_", "-"), default=option.default, **kwargs)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EngineOptions:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if "help" in f.metadata})

    # -- defaults that depend on the device and the checkpoint ------------------------------------------------
    def torch_device(self) -> torch.device:
        """The device to run on; one asked for that this machine lacks is a DeviceError (one line), not the
        assertion torch raises from deep inside the first tensor moved there."""
        try:
            device = torch.device(self.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        except RuntimeError as exc:  # "gpu", "cuda:x": torch's own message lists the device types it knows
            raise DeviceError(f"--device {self.device}: {exc}") from None
        if device.type == "cuda":
            check_cuda_device(device)
        return device

    def torch_dtype(self, config: Config, device: torch.device) -> torch.dtype:
        return resolve_dtype(self.dtype, config, device)

    def context_length(self, config: Config) -> int:
        return self.max_model_len or min(config.max_position_embeddings, 32768)

    def batched_tokens(self, device: torch.device) -> int:
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return 2048 if device.type == "cuda" else 512

    def cache_budget_bytes(self, device: torch.device) -> int:
        if self.cache_memory_gb is not None:
            return int(self.cache_memory_gb * 2**30)
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            return int(free * 0.85)
        return 4 * 2**30

    def prefix_cache_budget_bytes(self, device: torch.device) -> int:
        """Read after the slots are allocated (the GPU default is half of what they leave free)."""
        if self.prefix_cache_memory_gb is not None:
            return int(self.prefix_cache_memory_gb * 2**30)
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            return int(free * 0.5)
        return 2 * 2**30

    def uses_static_decode(self, device: torch.device) -> bool:
        return device.type == "cuda" if self.static_decode is None else self.static_decode

    def uses_compiled_decode(self, device: torch.device) -> bool:
        wanted = settings.compile_decode() if self.compile_decode is None else self.compile_decode
        return wanted and device.type == "cpu"


class DeviceError(ValueError):
    """The device asked for is not on this machine (or this PyTorch cannot use it)."""


def check_cuda_device(device: torch.device) -> None:
    """Raise DeviceError, saying why and the way out, when `device` (a CUDA one) cannot be used here."""
    asked = str(device)
    if torch.version.cuda is None:
        raise DeviceError(
            f"--device {asked}: this PyTorch ({torch.__version__}) is built without CUDA. Install a CUDA build of "
            "torch, or use --device cpu (only small test checkpoints, e.g. --model tiny, run at a useful speed there)"
        )
    if not torch.cuda.is_available():
        raise DeviceError(
            f"--device {asked}: no CUDA GPU is visible (torch.cuda.is_available() is False: no GPU, no driver, or "
            "CUDA_VISIBLE_DEVICES hides it). Use --device cpu for small test checkpoints such as --model tiny"
        )
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise DeviceError(
            f"--device {asked}: this machine has {count} CUDA GPU(s), numbered 0 to {count - 1}"
        )


def resolve_dtype(dtype: str | torch.dtype | None, config: Config, device: torch.device) -> torch.dtype:
    """None: fp32 on CPU (bf16 matmuls are slow there), the checkpoint's dtype on an accelerator."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return torch.float32 if device.type == "cpu" else DTYPES.get(config.dtype, torch.bfloat16)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]
