"""The GGUF tensor types the engine runs, with their block geometry (llama.cpp's `ggml-common.h` layout).

A quantized row of `cols` weights is `cols / block_size` blocks of `type_size` bytes each; rows follow each other,
so a 2-D weight [rows, cols] is a uint8 tensor [rows, row_bytes] and any row slice or row permutation of it is
another valid weight. F32/F16/BF16 tensors are plain arrays."""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class GGMLType(IntEnum):
    """ggml's type ids (the numbers stored in a GGUF tensor header; `gguf.GGMLQuantizationType` agrees)."""

    F32 = 0
    F16 = 1
    Q8_0 = 8
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    IQ4_XS = 23
    BF16 = 30
    MXFP4 = 39


class Format(NamedTuple):
    block_size: int  # weights per block
    type_size: int  # bytes per block


FORMATS: dict[GGMLType, Format] = {
    GGMLType.F32: Format(1, 4),
    GGMLType.F16: Format(1, 2),
    GGMLType.BF16: Format(1, 2),
    GGMLType.Q8_0: Format(32, 34),  # fp16 d, 32 x int8
    GGMLType.Q4_K: Format(256, 144),  # fp16 d, fp16 dmin, 12 B of 6-bit scales/mins, 128 B of nibbles
    GGMLType.Q5_K: Format(256, 176),  # as Q4_K + 32 B of high bits
    GGMLType.Q6_K: Format(256, 210),  # 128 B low nibbles, 64 B high 2-bits, 16 x int8 scales, fp16 d
    GGMLType.IQ4_XS: Format(256, 136),  # fp16 d, u16 scales_h, 4 B scales_l, 128 B nibbles (non-linear table)
    GGMLType.MXFP4: Format(32, 17),  # e8m0 exponent, 16 B of e2m1 nibbles
}
FLOAT_TYPES = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})
QUANTIZED_TYPES = frozenset(FORMATS) - FLOAT_TYPES


class UnsupportedTypeError(ValueError):
    """A tensor stored in a type the engine has no kernel for."""


def supported_names() -> str:
    return ", ".join(t.name for t in FORMATS)


def ggml_type(type_id: int, tensor: str = "?") -> GGMLType:
    """The type of a tensor header, or one error naming the tensor, its type and what is supported."""
    try:
        kind = GGMLType(int(type_id))
    except ValueError:
        kind = None
    if kind is None or kind not in FORMATS:
        name = _gguf_type_name(type_id)
        raise UnsupportedTypeError(
            f"tensor {tensor!r} is stored as {name}, which the engine does not run; supported types: "
            f"{supported_names()} (use a file of another quantization, e.g. Q4_K_M, Q8_0, IQ4_XS or MXFP4_MOE)"
        )
    return kind


def _gguf_type_name(type_id: int) -> str:
    try:
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(int(type_id)).name
    except (ImportError, ValueError):
        return f"type {type_id}"


def row_bytes(kind: GGMLType, cols: int) -> int:
    """Bytes of one row of `cols` weights; `cols` must be a whole number of blocks."""
    block, size = FORMATS[kind]
    if cols % block:
        raise ValueError(f"{kind.name} rows hold multiples of {block} weights, not {cols}")
    return cols // block * size
