"""Open a GGUF checkpoint (one file or a `-00001-of-0000N.gguf` split set), memory-mapped through the `gguf`
package: metadata as plain Python values and a table of tensors whose data are views into the mapped files (no
copy in host memory until a tensor is moved to a device)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.loader import CheckpointError
from engine.quant.formats import GGMLType, UnsupportedTypeError, ggml_type

ARCHITECTURE = "qwen35moe"
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    kind: GGMLType
    shape: tuple[int, ...]  # torch order: the slowest dimension first, a row's weights last
    data: np.ndarray  # the mapped bytes: uint8 [..., row_bytes] for quantized kinds, typed for F32/F16/BF16
    # (a torch tensor for checkpoints made in memory, see engine/testing/quant_recipe.py)
    file: Path

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


@dataclass
class GGUFCheckpoint:
    files: list[Path]
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensor]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for tensor in self.tensors.values():
            counts[tensor.kind.name] = counts.get(tensor.kind.name, 0) + 1
        return counts


def is_gguf(model: str | Path) -> bool:
    return str(model).lower().endswith(".gguf")


def split_parts(path: Path) -> list[Path]:
    """All parts of a split set given any one of them (in order), or [path] for a single file; a missing part is
    an error naming it."""
    match = _SPLIT.match(path.name)
    if not match:
        return [path]
    count = int(match["count"])
    parts = [path.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise CheckpointError(
            f"GGUF split set {match['stem']} has {count} parts but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing in {path.parent}"
        )
    return parts


def open_checkpoint(path: str | Path, architecture: str = ARCHITECTURE) -> GGUFCheckpoint:
    """Map every part of the checkpoint; the metadata come from the first part (later parts repeat the split
    keys only). Errors are one `CheckpointError` line: not a file, truncated, another architecture, a tensor type
    the engine has no kernel for."""
    first = Path(path).expanduser()
    if not first.is_file():
        raise CheckpointError(f"no GGUF file at {first}")
    files = split_parts(first)
    metadata: dict[str, Any] = {}
    tensors: dict[str, GGUFTensor] = {}
    for index, file in enumerate(files):
        reader = _reader(file)
        fields = _metadata(reader, file)
        if index == 0:
            metadata = fields
            found = str(metadata.get("general.architecture", "(none)"))
            if found != architecture:
                raise CheckpointError(
                    f"{file.name} is a GGUF of architecture {found!r}; this engine runs {architecture!r} "
                    "(Qwen3.5-MoE: Qwen-AgentWorld-35B-A3B, Qwen3.5-35B-A3B)"
                )
        for tensor in reader.tensors:
            if tensor.name in tensors:
                raise CheckpointError(
                    f"tensor {tensor.name!r} appears twice in the GGUF parts of {first.name}"
                )
            try:
                kind = ggml_type(int(tensor.tensor_type), tensor.name)
            except UnsupportedTypeError as exc:
                raise CheckpointError(f"{file.name}: {exc}") from exc
            tensors[tensor.name] = GGUFTensor(
                tensor.name, kind, tuple(int(d) for d in reversed(tensor.shape.tolist())), tensor.data, file
            )
    expected = metadata.get("split.tensors.count")
    if expected is not None and int(expected) != len(tensors):
        raise CheckpointError(
            f"the GGUF split set of {first.name} should hold {expected} tensors, its parts hold {len(tensors)}"
        )
    return GGUFCheckpoint(files, metadata, tensors)


def _reader(file: Path):
    from gguf import GGUFReader

    try:
        reader = GGUFReader(file, "c")  # copy-on-write: writable views for torch, nothing copied
    except Exception as exc:  # noqa: BLE001 - the reader raises ValueError, IndexError, struct errors, OSError
        raise CheckpointError(
            f"cannot read {file} as GGUF ({type(exc).__name__}: {exc}); is it truncated?"
        ) from exc
    size = file.stat().st_size
    for tensor in reader.tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size or tensor.data.nbytes != int(tensor.n_bytes):
            raise CheckpointError(
                f"{file} is truncated: tensor {tensor.name!r} ends at byte {end:,}, the file has {size:,} bytes "
                "(download it again)"
            )
    return reader


def _metadata(reader, file: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue  # the header's own counters
        try:
            value = field.contents()
        except Exception as exc:  # noqa: BLE001 - a malformed field
            raise CheckpointError(f"cannot read metadata {name!r} of {file}: {exc}") from exc
        out[name] = value.tolist() if isinstance(value, np.ndarray) else value
    return out
