"""The GEMV's inner step: 256 columns of a block of weight rows, decoded from packed words and multiplied by x,
accumulated without any reduction (`packed_step`). The decode kernels (`gemv.py`, quant_moe's pair kernels) call
it in their K loops and reduce once per output row at the end.

Layout. Every tensor is 5-D, [W, T, R, NT, L]: each thread owns one lane (L lanes share a row's 256 columns,
`VPL = 256 / L` values each) of R rows, for all T tokens; NT rows lie across the other threads. W (the lane's
packed words) and T, R are held in registers, so the products accumulate per element (one FFMA per weight and
token) and nothing crosses a thread until the caller's final `tl.sum`. The x pointers are spelled out over NT
(`x_rows` [1, T, 1, NT, 1]) so that x loads take the weights' layout instead of imposing their own.

Loads. Whole words, never bytes: 32-bit (vectorised to 64/128-bit where the compiler can prove the alignment) for
the 4-byte-aligned blocks (Q4_K 144 B, Q5_K 176 B, IQ4_XS 136 B, floats), 16-bit for the 2-byte-aligned ones
(Q8_0 34 B, Q6_K 210 B: llama.cpp's `get_int_b2`), and aligned 32-bit pairs joined by a funnel shift for MXFP4's
17-byte blocks.

Decode. A k-bit field at bit P of a word becomes an exact fp32 with one LOP3 and one FADD: the field masked in
place under the exponent of 2^23, minus 2^23, is field * 2^P; the 2^-P goes into the per-lane scale. (An
int-to-float conversion runs at a quarter or less of the FMA rate.) The exponent bits come in as `expo`, a
register the caller makes opaque, so ptxas keeps one register instead of rematerialising a mask per weight. The
non-linear types (IQ4_XS, MXFP4) look each byte's two values up in a 256-entry table of float pairs (`tab_ptr`,
`pair_table`): one 64-bit load per two weights. The weights equal the reference's fp32 dequantization (the
K-quants' d * scale * q is exact, then one rounding for the min), so only the summation order differs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.dequantize.reference import IQ4_VALUES, MXFP4_VALUES
from engine.kernels.dequantize.triton import _BF16, _F16, _F32, _IQ4_XS, _MXFP4, _Q4_K, _Q5_K, _Q6_K, _Q8_0
from engine.quant.formats import GGMLType

STEP_COLS = 256  # columns per K step, for every type and lane count
LANE_VALUES = (8, 16, 32)  # values one lane decodes per step (VPL)
MAGIC_EXPONENT = 0x4B000000  # the bits of 2^23 (exponent 150, empty mantissa)

_MAGIC = tl.constexpr(8388608.0)  # 2^23

_pair_tables: dict[torch.device, torch.Tensor] = {}


def words_per_lane(kind: int, vpl: int) -> int:
    """W, the packed words (or float vectors) one lane loads per step: the accumulator's first dim."""
    kind = GGMLType(kind)
    if kind in (GGMLType.Q6_K, GGMLType.Q8_0):  # 16-bit words: 4 (Q6_K) or 2 (Q8_0) values each
        return vpl // 4 if kind == GGMLType.Q6_K else vpl // 2
    if kind == GGMLType.F32:
        return vpl // 4  # 16-byte vectors of 4
    return vpl // 8  # 32-bit words of 8 nibbles; 16-byte vectors of 8 halves


def pair_table(device: torch.device) -> torch.Tensor:
    """float32 [2, 256, 2]: for IQ4_XS (0) and MXFP4 (1), each byte's (low nibble, high nibble) values."""
    table = _pair_tables.get(device)
    if table is None:
        byte = torch.arange(256)
        rows = []
        for values in (IQ4_VALUES, MXFP4_VALUES):
            lut = torch.tensor(values, dtype=torch.float32)
            rows.append(torch.stack((lut[byte & 15], lut[byte >> 4]), dim=-1))
        table = _pair_tables[device] = torch.stack(rows).to(device)
    return table


@triton.jit
def _i32(w_ptr, off):
    return tl.load((w_ptr + off).to(tl.pointer_type(tl.int32)))


@triton.jit
def _u16(w_ptr, off):
    return tl.load((w_ptr + off).to(tl.pointer_type(tl.uint16))).to(tl.int32)


@triton.jit
def _half(bits):
    """The fp16 in the low 16 bits, as fp32."""
    return (bits & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _field(words, P: tl.constexpr, BITS: tl.constexpr, expo):
    """(the BITS-bit field at bit P) * 2^P, exact in fp32 (P + BITS <= 23)."""
    bits = (words & (((1 << BITS) - 1) << P)) | expo
    return bits.to(tl.float32, bitcast=True) - _MAGIC


@triton.jit
def _signed_byte(words, P: tl.constexpr, expo):
    """(the int8 at bit P, plus 128) * 2^P, exact: the sign bit flipped inside the same LOP3."""
    bits = (words & (255 << P)) ^ (expo | (128 << P))
    return bits.to(tl.float32, bitcast=True) - _MAGIC


@triton.jit
def _x(x_rows, col, N: tl.constexpr, cols, EVEN_K: tl.constexpr):
    """x at columns col .. col + N - 1 (N = 2 or 4 consecutive), each as fp32 [W, T, ., NT, L]: one vector
    load, split in registers."""
    at = col[:, :, :, :, :, None] + tl.arange(0, N)[None, None, None, None, None, :]
    if EVEN_K:
        v = tl.load(x_rows[:, :, :, :, :, None] + at).to(tl.float32)
    else:
        v = tl.load(x_rows[:, :, :, :, :, None] + at, mask=at < cols, other=0.0).to(tl.float32)
    if N == 2:
        return tl.split(v)
    else:
        even, odd = tl.split(tl.reshape(v, v.shape[:-1] + [2, 2]))
        v0, v2 = tl.split(even)
        v1, v3 = tl.split(odd)
        return v0, v1, v2, v3


@triton.jit
def _fma_term(acc, x, q, scale, offset):
    """acc + x * (q * scale - offset), q * scale exact: the reference's weight, one rounding."""
    return acc + x * (q * scale - offset)


@triton.jit
def _k_scale_min(w_ptr, blk, c):
    """Q4_K/Q5_K: d * scale and dmin * min of sub-blocks 2c and 2c + 1 (chunk c's low and high nibbles), from
    the block's fp16 d, dmin and 12 bytes of 6-bit pairs (llama.cpp's `get_scale_min_k4`, done on words)."""
    head, low, mid, high = _i32(w_ptr, blk), _i32(w_ptr, blk + 4), _i32(w_ptr, blk + 8), _i32(w_ptr, blk + 12)
    first = c < 2  # scales/mins 0-3 are plain 6-bit bytes; 4-7 are split over the last 4 bytes
    scales = tl.where(first, low & 0x3F3F3F3F, (high & 0x0F0F0F0F) | ((low >> 2) & 0x30303030))
    mins = tl.where(first, mid & 0x3F3F3F3F, ((high >> 4) & 0x0F0F0F0F) | ((mid >> 2) & 0x30303030))
    scales = scales >> (16 * (c % 2))
    mins = mins >> (16 * (c % 2))
    d = _half(head)
    dmin = _half(head >> 16)
    ds_lo = d * (scales & 0xFF).to(tl.float32)
    ds_hi = d * ((scales >> 8) & 0xFF).to(tl.float32)
    return ds_lo, dmin * (mins & 0xFF).to(tl.float32), ds_hi, dmin * ((mins >> 8) & 0xFF).to(tl.float32)


@triton.jit
def _q4_k(acc, x_rows, w_ptr, off, lane, s, expo, W: tl.constexpr):
    # 144 B: fp16 d, fp16 dmin, 12 B of 6-bit scales/mins, 128 B of nibbles (chunk c of 32 bytes: sub-block 2c in
    # the low nibbles, 2c + 1 in the high). Lane: W words of one chunk.
    word = tl.arange(0, W)[:, None, None, None, None]
    g = lane * W + word  # quant word 0..31
    blk = off + s * 144
    words = _i32(w_ptr, blk + 16 + 4 * g)
    c = (lane * W) // 8
    ds_lo, dm_lo, ds_hi, dm_hi = _k_scale_min(w_ptr, blk, c)
    col = s * 256 + 64 * c + 4 * (g % 8)
    x_lo = _x(x_rows, col, 4, 0, True)
    x_hi = _x(x_rows, col + 32, 4, 0, True)
    top = words >> 12  # nibbles at bits 20-31 moved down within the mantissa
    acc = _fma_term(acc, x_lo[0], _field(words, 0, 4, expo), ds_lo, dm_lo)
    acc = _fma_term(acc, x_hi[0], _field(words, 4, 4, expo), ds_hi * 0.0625, dm_hi)
    acc = _fma_term(acc, x_lo[1], _field(words, 8, 4, expo), ds_lo * 0.00390625, dm_lo)
    acc = _fma_term(acc, x_hi[1], _field(words, 12, 4, expo), ds_hi * 0.000244140625, dm_hi)
    acc = _fma_term(acc, x_lo[2], _field(words, 16, 4, expo), ds_lo * 0.0000152587890625, dm_lo)
    acc = _fma_term(acc, x_hi[2], _field(top, 8, 4, expo), ds_hi * 0.00390625, dm_hi)
    acc = _fma_term(acc, x_lo[3], _field(top, 12, 4, expo), ds_lo * 0.000244140625, dm_lo)
    acc = _fma_term(acc, x_hi[3], _field(top, 16, 4, expo), ds_hi * 0.0000152587890625, dm_hi)
    return acc


@triton.jit
def _q5_k(acc, x_rows, w_ptr, off, lane, s, expo, W: tl.constexpr):
    # 176 B: as Q4_K with 32 B of fifth bits at 16 (bit j of byte l: weight l of sub-block j), quants at 48.
    word = tl.arange(0, W)[:, None, None, None, None]
    g = lane * W + word
    blk = off + s * 176
    words = _i32(w_ptr, blk + 48 + 4 * g)
    fifth = _i32(w_ptr, blk + 16 + 4 * (g % 8))
    c = (lane * W) // 8
    ds_lo, dm_lo, ds_hi, dm_hi = _k_scale_min(w_ptr, blk, c)
    # each byte of q_lo / q_hi: one 5-bit quant (the nibble, its fifth bit above it)
    fifth = fifth >> (2 * c)
    q_lo = (words & 0x0F0F0F0F) | ((fifth & 0x01010101) << 4)
    q_hi = ((words >> 4) & 0x0F0F0F0F) | ((fifth & 0x02020202) << 3)
    col = s * 256 + 64 * c + 4 * (g % 8)
    x_lo = _x(x_rows, col, 4, 0, True)
    x_hi = _x(x_rows, col + 32, 4, 0, True)
    top_lo = q_lo >> 12
    top_hi = q_hi >> 12
    acc = _fma_term(acc, x_lo[0], _field(q_lo, 0, 5, expo), ds_lo, dm_lo)
    acc = _fma_term(acc, x_hi[0], _field(q_hi, 0, 5, expo), ds_hi, dm_hi)
    acc = _fma_term(acc, x_lo[1], _field(q_lo, 8, 5, expo), ds_lo * 0.00390625, dm_lo)
    acc = _fma_term(acc, x_hi[1], _field(q_hi, 8, 5, expo), ds_hi * 0.00390625, dm_hi)
    acc = _fma_term(acc, x_lo[2], _field(q_lo, 16, 5, expo), ds_lo * 0.0000152587890625, dm_lo)
    acc = _fma_term(acc, x_hi[2], _field(q_hi, 16, 5, expo), ds_hi * 0.0000152587890625, dm_hi)
    acc = _fma_term(acc, x_lo[3], _field(top_lo, 12, 5, expo), ds_lo * 0.000244140625, dm_lo)
    acc = _fma_term(acc, x_hi[3], _field(top_hi, 12, 5, expo), ds_hi * 0.000244140625, dm_hi)
    return acc


@triton.jit
def _q6_k(acc, x_rows, w_ptr, off, lane, s, expo, W: tl.constexpr):
    # 210 B: 128 B low nibbles, 64 B high 2-bits, 16 int8 scales, fp16 d at 208; 2-byte aligned: 16-bit words.
    # Weight 128h + 32r + l (h < 2, r < 4, l < 32): low bits in byte 64h + 32(r % 2) + l (nibble r // 2), high
    # bits in byte 128 + 32h + l at bit 2r. Lane: 2W consecutive low-bit bytes (one h, one r % 2).
    word = tl.arange(0, W)[:, None, None, None, None]
    first = lane * (2 * W)  # the lane's first low-bit byte
    h, r0, l0 = first // 64, (first // 32) % 2, first % 32
    blk = off + s * 210
    low_bits = _u16(w_ptr, blk + first + 2 * word)
    high_bits = _u16(w_ptr, blk + 128 + 32 * h + l0 + 2 * word) >> (2 * r0)
    scale_at = blk + 192 + 8 * h + 2 * r0 + l0 // 16
    sc_lo = tl.load(w_ptr + scale_at).to(tl.int8, bitcast=True).to(tl.float32)
    sc_hi = tl.load(w_ptr + scale_at + 4).to(tl.int8, bitcast=True).to(tl.float32)
    d = _half(_u16(w_ptr, blk + 208))
    ds_lo = d * sc_lo
    ds_hi = d * sc_hi
    # each byte: one 6-bit quant (r = r0 from the low nibbles, r0 + 2 from the high)
    q_lo = (low_bits & 0x0F0F) | ((high_bits & 0x0303) << 4)
    q_hi = ((low_bits >> 4) & 0x0F0F) | (high_bits & 0x3030)
    col = s * 256 + 128 * h + 32 * r0 + l0 + 2 * word
    x_lo = _x(x_rows, col, 2, 0, True)
    x_hi = _x(x_rows, col + 64, 2, 0, True)
    acc = _fma_term(acc, x_lo[0], _field(q_lo, 0, 6, expo), ds_lo, 32.0 * ds_lo)
    acc = _fma_term(acc, x_hi[0], _field(q_hi, 0, 6, expo), ds_hi, 32.0 * ds_hi)
    acc = _fma_term(acc, x_lo[1], _field(q_lo, 8, 6, expo), ds_lo * 0.00390625, 32.0 * ds_lo)
    acc = _fma_term(acc, x_hi[1], _field(q_hi, 8, 6, expo), ds_hi * 0.00390625, 32.0 * ds_hi)
    return acc


@triton.jit
def _q8_0(
    acc, x_rows, w_ptr, off, lane, s, cols, expo, W: tl.constexpr, L: tl.constexpr, EVEN_K: tl.constexpr
):
    # 34 B: fp16 d, 32 int8; 2-byte aligned: 16-bit words of two quants. A step is 8 blocks, 32 / (2W) lanes each.
    word = tl.arange(0, W)[:, None, None, None, None]
    per_block: tl.constexpr = L // 8
    block = s * 8 + lane // per_block
    first = (lane % per_block) * (2 * W)  # the lane's first quant in its block
    if not EVEN_K:
        block = tl.minimum(block, cols // 32 - 1)  # lanes past the row read its last block; their x is 0
    blk = off + block * 34
    quants = _u16(w_ptr, blk + 2 + first + 2 * word)
    d = _half(_u16(w_ptr, blk))
    col = s * 256 + (lane // per_block) * 32 + first + 2 * word
    xs = _x(x_rows, col, 2, cols, EVEN_K)
    acc = _fma_term(acc, xs[0], _signed_byte(quants, 0, expo), d, 128.0 * d)
    acc = _fma_term(acc, xs[1], _signed_byte(quants, 8, expo), d * 0.00390625, 128.0 * d)
    return acc


@triton.jit
def _lookup(tab_ptr, TABLE: tl.constexpr, words, B: tl.constexpr):
    """The (low nibble, high nibble) values of byte B of each word, from the pair table."""
    pair = tab_ptr + TABLE * 512 + ((words >> (8 * B)) & 255)[:, :, :, :, :, None] * 2
    return tl.split(tl.load(pair + tl.arange(0, 2)[None, None, None, None, None, :]))


@triton.jit
def _iq4_xs(acc, x_rows, w_ptr, tab_ptr, off, lane, s, W: tl.constexpr):
    # 136 B: fp16 d, u16 high scale bits, 4 B low scale nibbles, 128 B indices: sub-block j's 16 bytes hold its
    # weights 0-15 (low nibbles) and 16-31 (high). Lane: W words of one sub-block.
    word = tl.arange(0, W)[:, None, None, None, None]
    first = lane * (4 * W)  # the lane's first index byte
    j, i0 = first // 16, first % 16
    blk = off + s * 136
    words = _i32(w_ptr, blk + 8 + first + 4 * word)
    head = _i32(w_ptr, blk)
    scale = ((_i32(w_ptr, blk + 4) >> (4 * j)) & 15) | (((head >> (16 + 2 * j)) & 3) << 4)
    ds = _half(head) * (scale - 32).to(tl.float32)
    col = s * 256 + 32 * j + i0 + 4 * word
    x_lo = _x(x_rows, col, 4, 0, True)
    x_hi = _x(x_rows, col + 16, 4, 0, True)
    for b in tl.static_range(4):
        v_lo, v_hi = _lookup(tab_ptr, 0, words, b)
        acc += x_lo[b] * (v_lo * ds)
        acc += x_hi[b] * (v_hi * ds)
    return acc


@triton.jit
def _funnel(w_ptr, at):
    """The little-endian 32-bit word at byte offsets `at` (any alignment): two aligned words, shifted together."""
    skew = (at & 3).to(tl.uint64) * 8
    aligned = at - (at & 3)
    low = _i32(w_ptr, aligned).to(tl.uint32, bitcast=True).to(tl.uint64)
    # an aligned word needs no second one (which may lie past the tensor's end)
    high_ptr = (w_ptr + aligned + 4).to(tl.pointer_type(tl.int32))
    high = tl.load(high_ptr, mask=skew != 0, other=0).to(tl.uint32, bitcast=True).to(tl.uint64)
    return (((high << 32) | low) >> skew).to(tl.uint32).to(tl.int32, bitcast=True)


@triton.jit
def _mxfp4(acc, x_rows, w_ptr, tab_ptr, off, lane, s, cols, W: tl.constexpr, L: tl.constexpr,
           EVEN_K: tl.constexpr):  # fmt: skip
    # 17 B: e8m0 exponent, 16 B of e2m1 nibbles (weights 0-15 low, 16-31 high). A step is 8 blocks.
    word = tl.arange(0, W)[:, None, None, None, None]
    per_block: tl.constexpr = L // 8
    block = s * 8 + lane // per_block
    first = (lane % per_block) * (4 * W)  # the lane's first quant byte in its block
    if not EVEN_K:
        block = tl.minimum(block, cols // 32 - 1)
    blk = off + block * 17
    words = _funnel(w_ptr, blk + 1 + first + 4 * word)
    exponent = tl.load(w_ptr + blk).to(tl.int32)
    # half of 2^(e - 127) (the table is doubled): the subnormals 2^-128, 2^-127 for e = 0, 1
    scale = tl.where(exponent < 2, 0x00200000 << tl.minimum(exponent, 1), (exponent - 1) << 23)
    scale = scale.to(tl.float32, bitcast=True)
    col = s * 256 + (lane // per_block) * 32 + first + 4 * word
    x_lo = _x(x_rows, col, 4, cols, EVEN_K)
    x_hi = _x(x_rows, col + 16, 4, cols, EVEN_K)
    for b in tl.static_range(4):
        v_lo, v_hi = _lookup(tab_ptr, 1, words, b)
        acc += x_lo[b] * (v_lo * scale)
        acc += x_hi[b] * (v_hi * scale)
    return acc


@triton.jit
def _floats(acc, x_rows, w_ptr, off, lane, s, cols, KIND: tl.constexpr, W: tl.constexpr, L: tl.constexpr,
            EVEN_K: tl.constexpr):  # fmt: skip
    # Plain values: W 16-byte vectors per lane, lanes interleaved (vector w of lane l: columns w * 16L + 16l ..)
    if KIND == _F32:
        dtype: tl.constexpr = tl.float32
        VEC: tl.constexpr = 4
    elif KIND == _F16:
        dtype: tl.constexpr = tl.float16
        VEC: tl.constexpr = 8
    else:
        tl.static_assert(KIND == _BF16, "packed_step: unsupported GGML type")
        dtype: tl.constexpr = tl.bfloat16
        VEC: tl.constexpr = 8
    word = tl.arange(0, W)[:, None, None, None, None, None]
    v = tl.arange(0, VEC)[None, None, None, None, None, :]
    col = s[:, :, :, :, :, None] * 256 + word * (L * VEC) + lane[:, :, :, :, :, None] * VEC + v
    w_at = (w_ptr + off[:, :, :, :, :, None]).to(tl.pointer_type(dtype)) + col
    x_at = x_rows[:, :, :, :, :, None] + col
    if EVEN_K:
        w = tl.load(w_at).to(tl.float32)
        x = tl.load(x_at).to(tl.float32)
    else:
        w = tl.load(w_at, mask=col < cols, other=0.0).to(tl.float32)
        x = tl.load(x_at, mask=col < cols, other=0.0).to(tl.float32)
    return acc + tl.sum(x * w, axis=5)


@triton.jit
def packed_step(acc, x_rows, w_ptr, tab_ptr, off, lane, s, cols, expo, KIND: tl.constexpr, W: tl.constexpr,
                L: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    """acc [W, T, R, NT, LT] plus the products of one step (256 columns) per lane: lane `lane` (0..L-1, its
    place in the step) of step `s` (both [1, 1, 1, 1, LT]: lanes of a row may work on different steps). x rows
    at pointers `x_rows` [1, T, 1|R, NT, 1]; weight rows at byte offsets `off` [1, 1, R, NT, 1] from `w_ptr`
    (16-byte aligned). EVEN_K false: the row ends inside a step (only the 32-weight types and floats), where
    its x reads 0."""
    if KIND == _Q4_K:
        acc = _q4_k(acc, x_rows, w_ptr, off, lane, s, expo, W)
    elif KIND == _Q5_K:
        acc = _q5_k(acc, x_rows, w_ptr, off, lane, s, expo, W)
    elif KIND == _Q6_K:
        acc = _q6_k(acc, x_rows, w_ptr, off, lane, s, expo, W)
    elif KIND == _Q8_0:
        acc = _q8_0(acc, x_rows, w_ptr, off, lane, s, cols, expo, W, L, EVEN_K)
    elif KIND == _IQ4_XS:
        acc = _iq4_xs(acc, x_rows, w_ptr, tab_ptr, off, lane, s, W)
    elif KIND == _MXFP4:
        acc = _mxfp4(acc, x_rows, w_ptr, tab_ptr, off, lane, s, cols, W, L, EVEN_K)
    else:
        acc = _floats(acc, x_rows, w_ptr, off, lane, s, cols, KIND, W, L, EVEN_K)
    return acc


@triton.jit
def opaque_exponent(n):
    """MAGIC_EXPONENT, computed from a runtime value (n >= 0 always) so that ptxas holds it in one register."""
    return tl.where(n >= 0, 0x4B000000, 0)
