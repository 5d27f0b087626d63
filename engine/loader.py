"""Find a checkpoint (local folder or hub id) and load its safetensors straight into the model on the target device.

Shards are memory-mapped and copied tensor by tensor into preallocated parameters, so a 70 GB checkpoint never
needs a full CPU copy. Accepted layouts: the multimodal wrapper (`model.language_model.` prefix) or a text-only
model (`model.`); routed experts fused (`experts.gate_up_proj` / `experts.down_proj`) or per expert
(`experts.E.{gate,up,down}_proj.weight`). Vision (`model.visual.*`) and MTP (`mtp.*`) tensors are skipped."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from tqdm import tqdm

DEFAULT_MODEL = "Qwen/Qwen-AgentWorld-35B-A3B"
_SKIPPED_PREFIXES = ("mtp.", "model.visual.", "visual.")
_PER_EXPERT = re.compile(
    r"^(?P<base>.*\.mlp\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$"
)
# Parameters the engine keeps in fp32 by default (the checkpoint stores them in fp32; transformers rounds them to the
# model dtype, which `hf_compat_dtypes` reproduces).
FP32_PARAM_SUFFIXES = (".linear_attn.A_log", ".linear_attn.dt_bias", ".linear_attn.norm.weight")


class CheckpointError(RuntimeError):
    """The checkpoint is missing, unreadable, incomplete or does not fit the model."""


def resolve_model_path(model: str) -> Path:
    """A local folder as is; otherwise a hub id, taken from the huggingface cache or downloaded (with progress)."""
    local = Path(model).expanduser()
    if local.is_dir():
        return local
    if local.exists() or model.startswith((".", "/", "~")) or model.count("/") != 1:
        raise CheckpointError(
            f"model {model!r} is neither a checkpoint folder nor a hub id like {DEFAULT_MODEL!r}"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    patterns = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "tokenizer*"]
    try:
        return Path(snapshot_download(model, allow_patterns=patterns, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    print(f"downloading {model} from the Hugging Face hub ...", file=sys.stderr)
    try:
        return Path(snapshot_download(model, allow_patterns=patterns))
    except Exception as exc:  # network errors come in many types (httpx, requests, hub errors)
        raise CheckpointError(
            f"cannot get {model!r}: it is not in the Hugging Face cache and the download failed ({exc}). "
            f"Download it where the hub is reachable (`hf download {model}`), copy the folder here "
            f"and pass its path as the model, or set HF_HOME to a cache that holds it."
        ) from exc


def checkpoint_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = sorted({path / name for name in weight_map.values()})
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no safetensors weights in {path}")
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise CheckpointError(f"checkpoint shards listed in the index are missing in {path}: {missing}")
    return files


def canonical_name(key: str) -> str | None:
    """Checkpoint key -> engine parameter name, or None for tensors the text model does not use."""
    if key.startswith(_SKIPPED_PREFIXES):
        return None
    if key.startswith("model.language_model."):
        return "model." + key[len("model.language_model.") :]
    if key.startswith("language_model."):
        return "model." + key[len("language_model.") :]
    return key


def _open(file: Path, device: torch.device):
    try:
        return safe_open(str(file), framework="pt", device=str(device))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"cannot read checkpoint shard {file}: {exc}") from exc


def _iter_tensors(files: list[Path], device: torch.device) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(file name, key, tensor) for every tensor, read lazily from memory-mapped shards."""
    for file in files:
        handle = _open(file, device)
        with handle as f:
            for key in f.keys():
                if canonical_name(key) is None:
                    continue
                try:
                    tensor = f.get_tensor(key)
                except (SafetensorError, OSError, RuntimeError) as exc:
                    raise CheckpointError(f"cannot read tensor {key!r} from {file}: {exc}") from exc
                yield file.name, key, tensor


def _count_tensors(files: list[Path], device: torch.device) -> int:
    total = 0
    for file in files:
        with _open(file, device) as f:
            total += sum(canonical_name(k) is not None for k in f.keys())
    return total


def load_weights(model: nn.Module, path: Path, device: torch.device, progress: bool = True) -> None:
    """Copy every checkpoint tensor into its parameter (cast to the parameter's dtype) and check completeness."""
    params = dict(model.named_parameters(remove_duplicate=False))
    files = checkpoint_files(path)
    loaded: set[str] = set()
    expert_rows: dict[str, set[tuple[int, str]]] = {}
    bar = tqdm(
        total=_count_tensors(files, device),
        desc="loading weights",
        unit="tensor",
        file=sys.stderr,
        disable=not progress,
    )
    with torch.no_grad():
        for file_name, key, tensor in _iter_tensors(files, device):
            bar.update(1)
            name = canonical_name(key)
            match = _PER_EXPERT.match(name)
            if match:
                _load_expert_slice(params, match, key, file_name, tensor, expert_rows)
                continue
            if name not in params:
                raise CheckpointError(f"unexpected tensor {key!r} in {file_name}: the model has no {name!r}")
            _copy_checked(params[name], tensor, key, file_name)
            loaded.add(name)
    bar.close()
    for base, rows in expert_rows.items():
        num_experts = params[f"{base}.gate_up_proj"].shape[0]
        wanted = {(e, p) for e in range(num_experts) for p in ("gate_proj", "up_proj", "down_proj")}
        absent = sorted(wanted - rows)
        if absent:
            shown = ", ".join(f"{base}.{e}.{p}.weight" for e, p in absent[:5])
            raise CheckpointError(f"checkpoint {path} lacks {len(absent)} per-expert tensors, e.g. {shown}")
        loaded.update({f"{base}.gate_up_proj", f"{base}.down_proj"})
    tied = (
        {"lm_head.weight"} if getattr(model, "config", None) and model.config.tie_word_embeddings else set()
    )
    missing = sorted(set(params) - loaded - tied)
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise CheckpointError(f"checkpoint {path} lacks {len(missing)} tensors the model needs: {shown}")


def _copy_checked(param: torch.Tensor, tensor: torch.Tensor, key: str, file_name: str) -> None:
    if tuple(tensor.shape) != tuple(param.shape):
        raise CheckpointError(
            f"tensor {key!r} in {file_name} has shape {tuple(tensor.shape)}, the model expects {tuple(param.shape)}"
        )
    param.copy_(tensor)


def _load_expert_slice(
    params: dict[str, nn.Parameter],
    match: re.Match[str],
    key: str,
    file_name: str,
    tensor: torch.Tensor,
    seen: dict[str, set[tuple[int, str]]],
) -> None:
    base, expert, proj = match["base"], int(match["expert"]), match["proj"]
    fused_name = f"{base}.down_proj" if proj == "down_proj" else f"{base}.gate_up_proj"
    if fused_name not in params:
        raise CheckpointError(f"unexpected tensor {key!r} in {file_name}: the model has no {fused_name!r}")
    fused = params[fused_name]
    if expert >= fused.shape[0]:
        raise CheckpointError(
            f"tensor {key!r} in {file_name}: expert {expert} >= num_experts {fused.shape[0]}"
        )
    if proj == "down_proj":
        target = fused[expert]
    else:
        inter = fused.shape[1] // 2
        target = fused[expert, :inter] if proj == "gate_proj" else fused[expert, inter:]
    _copy_checked(target, tensor, key, file_name)
    seen.setdefault(base, set()).add((expert, proj))


def build_model(
    config,
    path: Path,
    device: torch.device,
    dtype: torch.dtype,
    hf_compat_dtypes: bool = False,
    progress: bool = True,
) -> nn.Module:
    """Create the model without initialising it (meta tensors), allocate it on `device`, then load the weights."""
    model = meta_model(config, dtype, fp32_params=not hf_compat_dtypes)
    model.to_empty(device=device)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    load_weights(model, path, device, progress=progress)
    model.requires_grad_(False).fuse_weights()
    return model.eval()


def meta_model(config, dtype: torch.dtype, fp32_params: bool = True) -> nn.Module:
    """The model on the meta device (no memory) in `dtype`; with `fp32_params` A_log, dt_bias and the DeltaNet
    norm in fp32, as the loaders keep them."""
    from engine.models.qwen3_5_moe import Qwen3_5MoeForCausalLM

    with torch.device("meta"):
        model = Qwen3_5MoeForCausalLM(config)
    model.to(dtype)
    if fp32_params:
        for name, param in model.named_parameters():
            if name.endswith(FP32_PARAM_SUFFIXES):
                param.data = param.data.float()
    return model
