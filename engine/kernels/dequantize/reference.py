"""GGUF blocks to floats in plain torch: `dequantize(blocks, kind, cols, dtype)`, uint8 [..., row_bytes] ->
[..., cols].

One function per type, each a handful of whole-tensor ops, written for a CPU that dequantizes weights on every
step. Bit fields are cut on int64 words, eight bytes per op (torch pays per op and per short row, so byte-wise ops
on a block's 16- or 32-byte runs cost several times more); fp16 scales are `.view(torch.float16)` of byte pairs;
the non-linear types (IQ4_XS, MXFP4) look two weights up at once in a 64k-entry table of value pairs; the float
result is written by at most three passes (convert, scale, offset) and rounded once to `dtype`. The arithmetic is
llama.cpp's (`gguf/quants.py`): the fp32 product of the super-block scale and the sub-block scale, times the quant,
minus the fp32 product of dmin and the sub-block min; the results equal gguf's numpy dequantizer's bit for bit.

No `.item()`, `.tolist()` or data-dependent shapes, so it runs on any device and inside a CUDA graph. The value
tables are made per device on first use (a host-to-device copy): capture a graph after a warm-up call.
"""

from __future__ import annotations

import torch

from engine.quant.formats import FLOAT_TYPES, FORMATS, GGMLType, row_bytes

# llama.cpp's `kvalues_iq4nl` and the e2m1 values doubled (`kvalues_mxfp4`, the block scale is halved to match).
IQ4_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)

FLOAT_DTYPES = {GGMLType.F32: torch.float32, GGMLType.F16: torch.float16, GGMLType.BF16: torch.bfloat16}
_tables: dict[tuple[str, torch.device], torch.Tensor] = {}


def dequantize(
    blocks: torch.Tensor, kind: int, cols: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """blocks uint8 [..., row_bytes(kind, cols)] -> [..., cols] in `dtype`.

    F32/F16/BF16 rows are reinterpreted, then cast (a view of `blocks` when the dtype already matches); they may
    also come as the float tensor itself [..., cols] (how the loader keeps float weights)."""
    kind = GGMLType(kind)
    if kind in FLOAT_TYPES and blocks.is_floating_point():
        return blocks.to(dtype)
    if blocks.dtype != torch.uint8 or blocks.shape[-1] != row_bytes(kind, cols):
        raise ValueError(
            f"{kind.name} rows of {cols} weights are uint8 [..., {row_bytes(kind, cols)}], "
            f"got {blocks.dtype} {tuple(blocks.shape)}"
        )
    lead = blocks.shape[:-1]
    if kind in FLOAT_TYPES:
        return _bytes_as(blocks, FLOAT_DTYPES[kind]).to(dtype)
    block_size, type_size = FORMATS[kind]
    out = torch.empty(*lead, cols, dtype=dtype, device=blocks.device)
    _DEQUANTIZERS[kind](blocks.reshape(-1, type_size), out.view(-1, block_size))
    return out


def float_values(data: torch.Tensor, kind: GGMLType) -> torch.Tensor:
    """A float-kind weight's values without a copy: the tensor itself if it holds floats, else its bytes
    reinterpreted as the kind's dtype."""
    return data if data.is_floating_point() else _bytes_as(data, FLOAT_DTYPES[kind])


def _bytes_as(data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret uint8 bytes (last dim) as `dtype`, copying only when the view is not allowed (an offset or
    stride that is not a multiple of the element size)."""
    try:
        return data.view(dtype)
    except RuntimeError:
        return data.contiguous().clone().view(dtype)


def _fp16(blocks: torch.Tensor, start: int, count: int = 1) -> torch.Tensor:
    """`count` fp16 fields from byte `start` of every block, as fp32 [nb, count]."""
    return blocks[:, start : start + 2 * count].contiguous().view(torch.float16).float()


def _words(fields: torch.Tensor) -> torch.Tensor:
    """uint8 [nb, 8m] -> int64 [nb, m]: bit fields are cut eight bytes per op (the per-op cost of torch on short
    rows, not the bytes, is what a byte-wise version pays). Copies the fields out of the blocks first."""
    return fields.contiguous().view(torch.int64)


_NIBBLE = 0x0F0F0F0F0F0F0F0F  # the low nibble of every byte of a word
_ONES = 0x0101010101010101


def _nibbles(words: torch.Tensor, dim: int) -> torch.Tensor:
    """int64 words -> their low nibbles, then their high nibbles, stacked on a new axis `dim` (byte-wise values
    0-15 in int64 words; view as uint8)."""
    return torch.stack((words & _NIBBLE, (words >> 4) & _NIBBLE), dim=dim)


def _store(
    quants: torch.Tensor, scale: torch.Tensor, out: torch.Tensor, offset: torch.Tensor | None = None
) -> None:
    """out = quants * scale (+ offset), in fp32 as gguf computes it, rounded once to out's dtype. Each op has one
    broadcast operand (torch vectorizes that case, not two broadcasts in one addcmul)."""
    if out.dtype == torch.float32:
        out.copy_(quants).mul_(scale)
        if offset is not None:
            out.add_(offset)
    elif offset is None:
        torch.mul(quants, scale, out=out)
    else:
        torch.add(quants.to(torch.float32).mul_(scale), offset, out=out)


def _pair_table(name: str, values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """int16 [2 * 65536]: entry p (two packed index bytes b0, b1) holds the int8 pair (values[b0 & 15],
    values[b1 & 15]); entry 65536 + p the pair of high nibbles. One lookup yields two weights in their final order
    for the layouts whose low nibbles are weights 0-15 and high nibbles 16-31 (IQ4_XS, MXFP4). 256 KB per device."""
    key = (name, device)
    table = _tables.get(key)
    if table is None:
        lut = torch.tensor(values, dtype=torch.int8, device=device)
        byte = torch.arange(65536, dtype=torch.int32, device=device)
        b0, b1 = byte & 255, byte >> 8
        low = torch.stack((lut[b0 & 15], lut[b1 & 15]), dim=-1)
        high = torch.stack((lut[b0 >> 4], lut[b1 >> 4]), dim=-1)
        table = _tables[key] = torch.cat((low, high)).view(torch.int16).view(-1)
    return table


def _lookup_nibbles(packed: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """uint8 [nb, m, 16] of index nibbles -> int8 [nb, m, 32]: each 16-byte group's low nibbles' values, then its
    high nibbles'."""
    pairs = packed.contiguous().view(torch.uint16).to(torch.int32)  # [nb, m, 8]
    index = torch.stack((pairs, pairs + 65536), dim=-2)  # [nb, m, 2, 8]: low pairs, then high pairs
    return torch.index_select(table, 0, index.view(-1)).view(torch.int8).view(packed.shape[:-1] + (32,))


def _q8_0(blocks: torch.Tensor, out: torch.Tensor) -> None:
    # fp16 d, 32 x int8
    _store(blocks[:, 2:].view(torch.int8), _fp16(blocks, 0), out)


def _k_scale_min(scales: torch.Tensor) -> torch.Tensor:
    """Q4_K/Q5_K's 12 bytes of 6-bit scales and mins -> uint8 [nb, 16]: scales 0-7, mins 0-7 (llama.cpp's
    `get_scale_min_k4`). Bytes 0-3 hold scales 0-3 (low 6 bits), 4-7 mins 0-3, 8-11 the low 4 bits of scales 4-7
    (low nibble) and mins 4-7 (high nibble), whose top 2 bits are the top bits of bytes 0-3 / 4-7. Done on int32
    words of four bytes; the masks keep every shifted bit inside its byte."""
    low, mid, high = scales.contiguous().view(torch.int32).unbind(-1)
    top = 0x30303030
    return torch.stack(
        (
            low & 0x3F3F3F3F,
            (high & 0x0F0F0F0F) | ((low >> 2) & top),
            mid & 0x3F3F3F3F,
            ((high >> 4) & 0x0F0F0F0F) | ((mid >> 2) & top),
        ),
        dim=-1,
    ).view(torch.uint8)


def _k_affine(blocks: torch.Tensor, quant_words: torch.Tensor, out: torch.Tensor) -> None:
    """Q4_K/Q5_K: out = (d * scale_j) * q - dmin * min_j over 8 sub-blocks of 32; quants as words [nb, 8, 4]."""
    scale_min = _k_scale_min(blocks[:, 4:16]).float()
    d_dmin = _fp16(blocks, 0, count=2)
    d_scale = (scale_min[:, :8] * d_dmin[:, :1]).unsqueeze(-1)
    neg_min = (scale_min[:, 8:] * d_dmin[:, 1:]).neg_().unsqueeze(-1)
    _store(quant_words.view(torch.uint8), d_scale, out.view(-1, 8, 32), neg_min)


def _q4_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    # fp16 d, fp16 dmin, 12 B scales, 128 B quants: 32-byte chunk c holds sub-block 2c (low) and 2c+1 (high)
    quants = _nibbles(_words(blocks[:, 16:]).view(-1, 4, 4), dim=2)
    _k_affine(blocks, quants.view(-1, 8, 4), out)


def _q5_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    # as Q4_K, plus 32 B of fifth bits at 16:48 (bit j of byte l: weight l of sub-block j), quants at 48:176
    quants = _nibbles(_words(blocks[:, 48:]).view(-1, 4, 4), dim=2).view(-1, 8, 4)
    high = _words(blocks[:, 16:48])
    fifth = torch.stack([(high >> j) & _ONES for j in range(8)], dim=1)  # [nb, 8, 4]
    _k_affine(blocks, quants.add_(fifth << 4), out)  # at most 31 per byte: no carry between bytes


def _q6_k(blocks: torch.Tensor, out: torch.Tensor) -> None:
    # 128 B low 4 bits, 64 B high 2 bits, 16 x int8 scales (one per 16 weights), fp16 d at 208. Weight
    # h*128 + r*32 + l (h < 2, r < 4, l < 32): low bits in byte h*64 + (r%2)*32 + l (high nibble when r >= 2), high
    # bits in byte h*32 + l at bit 2r; the quant is those 6 bits minus 32.
    low = _nibbles(_words(blocks[:, :128]).view(-1, 2, 8), dim=2)  # [nb, 2, 2, 8] = [h, r // 2, (r % 2, l)]
    high = _words(blocks[:, 128:192]).view(-1, 2, 4)
    top = torch.stack([(high >> 2 * r) & 0x0303030303030303 for r in range(4)], dim=2)  # [nb, 2, 4, 4]
    six_bits = low.view(-1, 2, 4, 4).add_(top << 4).view(torch.uint8)
    quants = six_bits.sub_(32).view(torch.int8)  # uint8 wraps: the int8 view holds q - 32
    d_scale = (_fp16(blocks, 208) * blocks[:, 192:208].view(torch.int8)).unsqueeze(-1)
    _store(quants.view(-1, 16, 16), d_scale, out.view(-1, 16, 16))


def _iq4_xs(blocks: torch.Tensor, out: torch.Tensor) -> None:
    # fp16 d, u16 scales_h (2 bits per sub-block), 4 B scales_l (a nibble per sub-block), 128 B indices into the
    # non-linear table: sub-block j's 16 bytes hold its weights 0-15 (low nibbles) and 16-31 (high nibbles).
    low = blocks[:, 4:8]
    scales_low = torch.stack((low & 15, low >> 4), dim=-1).view(-1, 8)  # byte i: sub-blocks 2i, 2i + 1
    high = blocks[:, 2:4]
    scales_high = torch.stack([(high >> 2 * s) & 3 for s in range(4)], dim=-1).view(-1, 8)
    scale = scales_low.add_(scales_high, alpha=16).sub_(32).view(torch.int8)
    d_scale = (_fp16(blocks, 0) * scale).unsqueeze(-1)
    values = _lookup_nibbles(blocks[:, 8:].view(-1, 8, 16), _pair_table("iq4", IQ4_VALUES, out.device))
    _store(values, d_scale, out.view(-1, 8, 32))


def _mxfp4(blocks: torch.Tensor, out: torch.Tensor) -> None:
    # e8m0 exponent byte, 16 B of e2m1 nibbles (weights 0-15 low, 16-31 high). The scale is half of 2^(e-127)
    # (the table is doubled): bits (e-1) << 23, or the subnormals 2^-128, 2^-127 for e = 0, 1.
    exponent = blocks[:, :1].to(torch.int32)
    bits = torch.where(exponent < 2, 0x00200000 << exponent.clamp(max=1), (exponent - 1) << 23)
    values = _lookup_nibbles(blocks[:, 1:].view(-1, 1, 16), _pair_table("mxfp4", MXFP4_VALUES, out.device))
    _store(values.view(-1, 32), bits.view(torch.float32), out)


_DEQUANTIZERS = {
    GGMLType.Q8_0: _q8_0,
    GGMLType.Q4_K: _q4_k,
    GGMLType.Q5_K: _q5_k,
    GGMLType.Q6_K: _q6_k,
    GGMLType.IQ4_XS: _iq4_xs,
    GGMLType.MXFP4: _mxfp4,
}
