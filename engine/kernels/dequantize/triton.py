"""GGUF blocks to floats in Triton: `dequant_tile`, the per-type decoder the quantized matmul and MoE kernels call
inside their K loops, and a `dequantize` kernel built on it (embedding rows on a GPU, and a direct test of the
decoder against gguf's numpy dequantizer).

Every kernel walks a weight row block by block; a block of `32 * SUBS` weights is decoded as SUBS tiles of 32
columns (a K-quant's 256-weight super-block is 8 tiles, Q8_0/MXFP4 one, a float weight's "block" is 32 plain
values). `dequant_tile(..., J, KIND)` returns tile J of the block at byte offset `base` of each row. The tile's two
axes come from the caller: `base`/`ok` are shaped [R, 1] and `c` (0..31) [1, 32] for a [R, 32] tile (GEMV: rows
reduced along the columns), or `base` [1, R] and `c` [32, 1] for the transposed [32, R] tile `tl.dot` wants. KIND
and J are compile-time, so each tile's per-row scale decoding is a few scalar ops and each weight costs a byte load
(cached: tiles of one block share their bytes), a shift, a mask and a multiply-add.

Bytes are loaded one by one and fp16 fields assembled from two bytes: no alignment is assumed (Q8_0 and Q6_K
blocks are 34 and 210 bytes, MXFP4 17). The two non-linear value tables come in through `lut_ptr` (float32 [32]:
IQ4_NL values, then MXFP4's doubled e2m1 values); `value_table(device)` caches it per device.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.dequantize import reference
from engine.quant.formats import FLOAT_TYPES, FORMATS, GGMLType, row_bytes

_F32 = tl.constexpr(int(GGMLType.F32))
_F16 = tl.constexpr(int(GGMLType.F16))
_BF16 = tl.constexpr(int(GGMLType.BF16))
_Q8_0 = tl.constexpr(int(GGMLType.Q8_0))
_Q4_K = tl.constexpr(int(GGMLType.Q4_K))
_Q5_K = tl.constexpr(int(GGMLType.Q5_K))
_Q6_K = tl.constexpr(int(GGMLType.Q6_K))
_IQ4_XS = tl.constexpr(int(GGMLType.IQ4_XS))
_MXFP4 = tl.constexpr(int(GGMLType.MXFP4))

_FLOAT_BYTES = {GGMLType.F32: 4, GGMLType.F16: 2, GGMLType.BF16: 2}
_value_tables: dict[torch.device, torch.Tensor] = {}


def geometry(kind: int) -> tuple[int, int]:
    """(TYPE_SIZE, SUBS) of the kernels' blocks: bytes per block and 32-column tiles per block."""
    kind = GGMLType(kind)
    if kind in FLOAT_TYPES:
        return 32 * _FLOAT_BYTES[kind], 1
    block_size, type_size = FORMATS[kind]
    return type_size, block_size // 32


def as_blocks(data: torch.Tensor, kind: int, cols: int) -> tuple[torch.Tensor, GGMLType] | None:
    """The weight as contiguous uint8 blocks and their type, as the kernels read it, or None if they cannot: a
    float weight given as a float tensor becomes its bytes (typed by its own dtype); float rows must be whole
    32-value tiles."""
    kind = GGMLType(kind)
    if kind not in FLOAT_TYPES:
        return data.contiguous(), kind
    values = reference.float_values(data, kind)
    own_kind = {torch.float32: GGMLType.F32, torch.float16: GGMLType.F16, torch.bfloat16: GGMLType.BF16}
    if values.dtype not in own_kind or cols % 32:
        return None
    return values.contiguous().view(torch.uint8), own_kind[values.dtype]


def value_table(device: torch.device) -> torch.Tensor:
    table = _value_tables.get(device)
    if table is None:
        values = reference.IQ4_VALUES + reference.MXFP4_VALUES
        table = _value_tables[device] = torch.tensor(values, dtype=torch.float32, device=device)
    return table


@triton.jit
def _fp16_at(ptr, ok):
    """The little-endian fp16 at byte pointer(s) `ptr`, as fp32 (two byte loads: no alignment needed)."""
    low = tl.load(ptr, mask=ok, other=0).to(tl.uint16)
    high = tl.load(ptr + 1, mask=ok, other=0).to(tl.uint16)
    return (low | (high << 8)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _k_scale_min(ptr, ok, J: tl.constexpr):
    """Scale and min of sub-block J from the 12 bytes at `ptr` (Q4_K/Q5_K's packed 6-bit pairs), as fp32."""
    if J < 4:
        scale = tl.load(ptr + J, mask=ok, other=0) & 63
        minimum = tl.load(ptr + J + 4, mask=ok, other=0) & 63
    else:
        low_bits = tl.load(ptr + J + 4, mask=ok, other=0)
        scale = (low_bits & 15) | ((tl.load(ptr + J - 4, mask=ok, other=0) >> 6) << 4)
        minimum = (low_bits >> 4) | ((tl.load(ptr + J, mask=ok, other=0) >> 6) << 4)
    return scale.to(tl.float32), minimum.to(tl.float32)


@triton.jit
def dequant_tile(w_ptr, lut_ptr, base, ok, c, J: tl.constexpr, KIND: tl.constexpr):
    """Columns J*32 + c of the blocks at byte offsets `base` of `w_ptr` (uint8), as fp32; rows where `ok` is
    false read zeros. Byte layouts: llama.cpp's `block_*` structs (see the reference's per-type comments)."""
    row = w_ptr + base
    if KIND == _Q8_0:
        d = _fp16_at(row, ok)
        q = tl.load(row + 2 + c, mask=ok, other=0).to(tl.int8, bitcast=True)
        w = q.to(tl.float32) * d
    elif KIND == _Q4_K:
        d = _fp16_at(row, ok)
        dmin = _fp16_at(row + 2, ok)
        scale, minimum = _k_scale_min(row + 4, ok, J)
        q = (tl.load(row + 16 + (J // 2) * 32 + c, mask=ok, other=0) >> (4 * (J % 2))) & 15
        w = (d * scale) * q.to(tl.float32) - dmin * minimum
    elif KIND == _Q5_K:
        d = _fp16_at(row, ok)
        dmin = _fp16_at(row + 2, ok)
        scale, minimum = _k_scale_min(row + 4, ok, J)
        low = (tl.load(row + 48 + (J // 2) * 32 + c, mask=ok, other=0) >> (4 * (J % 2))) & 15
        fifth = (tl.load(row + 16 + c, mask=ok, other=0) >> J) & 1
        w = (d * scale) * (low | (fifth << 4)).to(tl.float32) - dmin * minimum
    elif KIND == _Q6_K:
        # tile J = weights 128h + 32r + c (h = J // 4, r = J % 4); 16 weights per int8 scale
        low = (tl.load(row + (J // 4) * 64 + (J % 2) * 32 + c, mask=ok, other=0) >> (4 * ((J % 4) // 2))) & 15
        high = (tl.load(row + 128 + (J // 4) * 32 + c, mask=ok, other=0) >> (2 * (J % 4))) & 3
        q = (low | (high << 4)).to(tl.int32) - 32
        scale = tl.load(row + 192 + 2 * J + c // 16, mask=ok, other=0).to(tl.int8, bitcast=True)
        d = _fp16_at(row + 208, ok)
        w = (d * scale.to(tl.float32)) * q.to(tl.float32)
    elif KIND == _IQ4_XS:
        d = _fp16_at(row, ok)
        scale_low = (tl.load(row + 4 + J // 2, mask=ok, other=0) >> (4 * (J % 2))) & 15
        scale_high = (tl.load(row + 2 + J // 4, mask=ok, other=0) >> (2 * (J % 4))) & 3
        scale = (scale_low | (scale_high << 4)).to(tl.int32) - 32
        packed = tl.load(row + 8 + J * 16 + c % 16, mask=ok, other=0).to(tl.int32)
        value = tl.load(lut_ptr + ((packed >> (4 * (c // 16))) & 15))
        w = (d * scale.to(tl.float32)) * value
    elif KIND == _MXFP4:
        exponent = tl.load(row, mask=ok, other=0).to(tl.int32)
        # half of 2^(e - 127) (the table is doubled): the subnormals 2^-128, 2^-127 for e = 0, 1
        bits = tl.where(exponent < 2, 0x00200000 << tl.minimum(exponent, 1), (exponent - 1) << 23)
        packed = tl.load(row + 1 + c % 16, mask=ok, other=0).to(tl.int32)
        value = tl.load(lut_ptr + 16 + ((packed >> (4 * (c // 16))) & 15))
        w = bits.to(tl.float32, bitcast=True) * value
    elif KIND == _F32:
        w = tl.load((row + 4 * c).to(tl.pointer_type(tl.float32)), mask=ok, other=0.0)
    elif KIND == _F16:
        w = tl.load((row + 2 * c).to(tl.pointer_type(tl.float16)), mask=ok, other=0.0).to(tl.float32)
    else:
        tl.static_assert(KIND == _BF16, "dequant_tile: unsupported GGML type")
        w = tl.load((row + 2 * c).to(tl.pointer_type(tl.bfloat16)), mask=ok, other=0.0).to(tl.float32)
    return w


@triton.jit
def _dequantize_kernel(
    w_ptr,
    lut_ptr,
    out_ptr,
    num_rows,
    cols,
    row_bytes,
    KIND: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    SUBS: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    """One program: BLOCK_R rows x one block (program id 1) of the weight."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    blk = tl.program_id(1)
    ok = (rows < num_rows)[:, None]
    base = rows.to(tl.int64)[:, None] * row_bytes + blk * TYPE_SIZE
    c = tl.arange(0, 32)[None, :]
    out_rows = out_ptr + rows.to(tl.int64)[:, None] * cols + blk * (SUBS * 32)
    for j in tl.static_range(SUBS):
        w = dequant_tile(w_ptr, lut_ptr, base, ok, c, j, KIND)
        tl.store(out_rows + j * 32 + c, w.to(out_ptr.dtype.element_ty), mask=ok)


def dequantize(
    blocks: torch.Tensor, kind: int, cols: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """blocks uint8 [..., row_bytes(kind, cols)] -> [..., cols] in `dtype` (float types: the reference's view)."""
    kind = GGMLType(kind)
    if kind in FLOAT_TYPES or blocks.shape[-1] != row_bytes(kind, cols):
        return reference.dequantize(blocks, kind, cols, dtype)  # a view, or the reference's error
    flat = blocks.reshape(-1, blocks.shape[-1])
    out = torch.empty(*blocks.shape[:-1], cols, dtype=dtype, device=blocks.device)
    num_rows = flat.shape[0]
    if num_rows == 0:
        return out
    type_size, subs = geometry(kind)
    block_r = 16
    _dequantize_kernel[(triton.cdiv(num_rows, block_r), cols // (32 * subs))](
        flat, value_table(blocks.device), out, num_rows, cols, flat.shape[1],
        KIND=int(kind), TYPE_SIZE=type_size, SUBS=subs, BLOCK_R=block_r, num_warps=4,
    )  # fmt: skip
    return out
