"""Random blocks of the GGUF types, and random checkpoints of a tensor table (`engine/gguf/tensor_table.py`: the
real model's tensors as llama.cpp's quantizer types them). What the memory plan's 24 GiB check and
`bench/gpu_check.py`'s real-shape GGUF rows run on, since no weights can be downloaded here."""

from __future__ import annotations

import numpy as np
import torch

from engine.config import Config
from engine.gguf.reader import GGUFCheckpoint, GGUFTensor
from engine.gguf.tensor_table import q4_k_m_table, table_bytes, use_more_bits
from engine.quant.formats import FLOAT_TYPES, FORMATS, GGMLType, row_bytes

__all__ = ["q4_k_m_table", "random_blocks", "random_checkpoint", "table_bytes", "use_more_bits"]

_FLOAT_DTYPES = {GGMLType.F32: torch.float32, GGMLType.F16: torch.float16, GGMLType.BF16: torch.bfloat16}


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
