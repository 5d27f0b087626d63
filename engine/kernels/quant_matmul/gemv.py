"""The decode GEMV, `x @ W.T` for up to `GEMV_MAX_TOKENS` tokens with W in GGUF blocks (or floats of another
dtype than x): each program streams its rows' blocks once for all the tokens, decodes them from packed words and
accumulates per thread (`packed.py`), and reduces once per output row and token, at the end. No split-K, no
partial sums, no host sync: one launch per weight, capturable in a CUDA graph.

The layout (`decode_layout`) trades registers for reuse and for parallelism. Per step a lane decodes 32 values
at 1-2 tokens, 16 at 3-4, 8 beyond, of R rows (the x values it loads serve all R): `rows_per_thread` holds the R of
each type and token band, the values x tokens x R registers bounded so that nothing spills. A weight with few rows (MoE experts, most
projections at hidden 2048) would leave the GPU a few warps per SM, each walking the whole K loop: its rows then
get more lanes, `split` groups of them taking every `split`-th step (split-K inside the program, summed by the
same final reduction), until about TARGET_WARPS warps run.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from engine import settings
from engine.kernels.quant_matmul.packed import (
    STEP_COLS,
    opaque_exponent,
    packed_step,
    pair_table,
    words_per_lane,
)
from engine.quant.formats import FLOAT_TYPES, GGMLType

GEMV_MAX_TOKENS = 16
NUM_WARPS = 4
THREADS = 32 * NUM_WARPS
# Split K inside a program until about this many warps run (~30 per SM of an H200's 132, a 4090's 128).
TARGET_WARPS = 4096


# The interpreter pays per op and program, not per element: 4x the rows per thread, a quarter of the programs.
_ROWS_SCALE = 4 if settings.triton_interpret() else 1
# Rows a thread decodes per step, by type and token band (block_t <= 2, <= 4, <= 8, <= 16): the most that spill on
# no card (sm_86/89/90/120) under Triton 3.6 (ptxas 12.8) and 3.9 (ptxas 12.9), whose register allocations differ
# (`python -m engine.kernels.aot` under each: tests/kernels/test_aot_compile.py). Q4_K/Q5_K take 4 at 1-2 tokens:
# with 2, ptxas 12.8 spills 4-24 B into the K loop at ~100 registers (4 costs 3.9 6% more instructions per weight
# than 2 did, 1 would cost 27%); Q8_0 (16-bit words of 2 weights: the most words per lane) 1 at 1-2 and 9-16
# tokens, 2 at 5-8; at 9-16 tokens no quantized type keeps 4 (IQ4_XS spilled ~1 KB under 3.6, MXFP4 12 B).
_ROWS_PER_THREAD: dict[GGMLType, tuple[int, int, int, int]] = {
    GGMLType.Q4_K: (4, 2, 4, 2),
    GGMLType.Q5_K: (4, 2, 4, 2),
    GGMLType.Q6_K: (2, 2, 2, 2),
    GGMLType.Q8_0: (1, 2, 2, 1),
    GGMLType.IQ4_XS: (2, 2, 4, 2),
    GGMLType.MXFP4: (2, 2, 4, 2),
    GGMLType.F32: (2, 2, 2, 2),  # words of one weight: 4 rows spilled 4 B at 8 tokens on sm_90
}
_FLOAT_ROWS = (2, 2, 4, 4)  # bf16/f16: 16-byte words of 8 weights


def rows_per_thread(block_t: int, kind: int) -> int:
    """R for `block_t` (a power of two <= GEMV_MAX_TOKENS) tokens of weights of type `kind`."""
    band = 0 if block_t <= 2 else 1 if block_t <= 4 else 2 if block_t <= 8 else 3
    return _ROWS_PER_THREAD.get(GGMLType(kind), _FLOAT_ROWS)[band]


class Layout(NamedTuple):
    vpl: int  # values a lane decodes per step (and row)
    lanes: int  # L: lanes per row and step, 256 / vpl
    split: int  # KS: steps a row works on at once (lanes per row: L * KS)
    row_threads: int  # NT: rows across the threads of a program
    rows_per_thread: int  # R
    block_t: int  # tokens, rounded up to a power of two

    @property
    def block_rows(self) -> int:
        return self.rows_per_thread * self.row_threads

    def words(self, kind: int) -> int:
        return words_per_lane(kind, self.vpl)


def decode_layout(
    tokens: int, rows: int, cols: int, kind: int, min_row_threads: int = 1, per_thread: int | None = None
) -> Layout:
    """The layout for `tokens` tokens and `rows` weight rows of `cols` columns in all (MoE: rows of every
    program), with at least `min_row_threads` rows across a program's threads and `per_thread` rows a thread
    (default: `rows_per_thread`)."""
    block_t = triton.next_power_of_2(tokens)
    vpl = 32 if block_t <= 2 else 16 if block_t <= 4 else 8
    per_thread = rows_per_thread(block_t, kind) if per_thread is None else per_thread
    lanes = STEP_COLS // vpl
    steps = cols // STEP_COLS if cols % STEP_COLS == 0 else 1  # a partial last step: no split
    split = 1
    while (
        rows * lanes * split < 32 * TARGET_WARPS
        and steps % (2 * split) == 0
        and THREADS // (lanes * 2 * split) >= min_row_threads
    ):
        split *= 2
    return Layout(vpl, lanes, split, THREADS // (lanes * split), per_thread * _ROWS_SCALE, block_t)


@triton.jit
def rows_dot(x_rows, w_ptr, tab_ptr, off, cols, expo, KIND: tl.constexpr, W: tl.constexpr, L: tl.constexpr,
             KS: tl.constexpr, BLOCK_T: tl.constexpr, R: tl.constexpr, NT: tl.constexpr,
             EVEN_K: tl.constexpr):  # fmt: skip
    """sum_k x[t, k] * W[n, k] for the x rows at pointers `x_rows` [1, T, 1|R, NT, 1] and the weight rows at
    byte offsets `off` [1, 1, R, NT, 1] -> fp32 [T, R, NT]. The K loop accumulates per element; the two sums at
    the end are the only reduction."""
    lanes = tl.arange(0, L * KS)[None, None, None, None, :]
    acc = tl.zeros([W, BLOCK_T, R, NT, L * KS], dtype=tl.float32)
    steps = cols // 256 if EVEN_K else tl.cdiv(cols, 256)
    for s in range(0, steps // KS):
        acc = packed_step(
            acc, x_rows, w_ptr, tab_ptr, off, lanes % L, s * KS + lanes // L, cols, expo, KIND, W, L, EVEN_K
        )
    return tl.sum(tl.sum(acc, axis=4), axis=0)


@triton.jit
def _part(x_ptr, w_ptr, tab_ptr, out_ptr, block, num_tokens, num_rows, first_col, out_cols, cols, row_bytes,
          KIND: tl.constexpr, W: tl.constexpr, L: tl.constexpr, KS: tl.constexpr, NT: tl.constexpr,
          R: tl.constexpr, BLOCK_T: tl.constexpr, EVEN_K: tl.constexpr):  # fmt: skip
    """Block `block` of R * NT rows of one weight, into output columns first_col + row."""
    rows = block * (R * NT) + tl.arange(0, R)[:, None] * NT + tl.arange(0, NT)[None, :]  # [R, NT]
    tokens = tl.arange(0, BLOCK_T)
    # Rows and tokens past the ends read the last ones (no masks in the loop); their results are not stored.
    off = (tl.minimum(rows, num_rows - 1).to(tl.int64) * row_bytes)[None, None, :, :]
    x_start = tl.minimum(tokens, num_tokens - 1).to(tl.int64) * cols
    across = tl.zeros([NT], dtype=tl.int64)[None, None, None, :]  # x pointers spelled out over NT (packed.py)
    x_rows = x_ptr + (x_start[None, :, None, None] + across)[:, :, :, :, None]
    out = rows_dot(
        x_rows, w_ptr, tab_ptr, off[:, :, :, :, None], cols, opaque_exponent(num_rows),
        KIND, W, L, KS, BLOCK_T, R, NT, EVEN_K,
    )  # fmt: skip
    tl.store(
        out_ptr + tokens[:, None, None] * out_cols + first_col + rows[None, :, :],
        out.to(out_ptr.dtype.element_ty),
        mask=(tokens < num_tokens)[:, None, None] & (rows < num_rows)[None, :, :],
    )


@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    w2_ptr,
    tab_ptr,
    out_ptr,
    num_tokens,
    num_rows,
    rows2,
    cols,
    row_bytes,
    row_bytes2,
    KIND: tl.constexpr,
    W: tl.constexpr,
    KIND2: tl.constexpr,
    W2: tl.constexpr,
    L: tl.constexpr,
    KS: tl.constexpr,
    NT: tl.constexpr,
    R: tl.constexpr,
    BLOCK_T: tl.constexpr,
    EVEN_K: tl.constexpr,
    PARTS: tl.constexpr,
):
    # PARTS == 2: a fused projection stored as two types (rows2 more rows at w2_ptr): one launch, one output.
    block = tl.program_id(0)
    out_cols = num_rows + rows2
    if PARTS == 1:
        _part(
            x_ptr, w_ptr, tab_ptr, out_ptr, block, num_tokens, num_rows, 0, out_cols, cols, row_bytes,
            KIND, W, L, KS, NT, R, BLOCK_T, EVEN_K,
        )  # fmt: skip
    else:
        first_blocks = tl.cdiv(num_rows, R * NT)
        if block < first_blocks:
            _part(
                x_ptr, w_ptr, tab_ptr, out_ptr, block, num_tokens, num_rows, 0, out_cols, cols, row_bytes,
                KIND, W, L, KS, NT, R, BLOCK_T, EVEN_K,
            )  # fmt: skip
        else:
            _part(
                x_ptr, w2_ptr, tab_ptr, out_ptr, block - first_blocks, num_tokens, rows2, num_rows, out_cols,
                cols, row_bytes2, KIND2, W2, L, KS, NT, R, BLOCK_T, EVEN_K,
            )  # fmt: skip


def aligned(blocks: torch.Tensor, kind: int) -> torch.Tensor:
    """The blocks at a 4-byte aligned address, as the quantized types' word loads assume (a copy only for a view
    that starts elsewhere, which the loader never makes; float weights load by element)."""
    if GGMLType(kind) in FLOAT_TYPES or blocks.data_ptr() % 4 == 0:
        return blocks
    return blocks.clone()


def quant_gemv(
    x: torch.Tensor,
    blocks: torch.Tensor,
    kind: int,
    cols: int,
    second: tuple[torch.Tensor, int] | None = None,
) -> torch.Tensor:
    """x [T <= GEMV_MAX_TOKENS, cols] contiguous; blocks uint8 [N, row_bytes] contiguous -> x @ W.T [T, N] in
    x.dtype. `second` (blocks [N2, row_bytes2], kind): more rows of the same weight, stored in another type,
    computed in the same launch: [T, N + N2]."""
    num_tokens, num_rows = x.shape[0], blocks.shape[0]
    blocks = aligned(blocks, kind)
    blocks2, kind2 = (blocks, kind) if second is None else (aligned(second[0], second[1]), second[1])
    rows2 = 0 if second is None else blocks2.shape[0]
    # the layout suits the more register-hungry part (the fewer rows a thread)
    block_t = triton.next_power_of_2(num_tokens)
    hungry = min((kind, kind2), key=lambda k: rows_per_thread(block_t, k))
    layout = decode_layout(num_tokens, num_rows + rows2, cols, hungry)
    out = torch.empty(num_tokens, num_rows + rows2, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(num_rows, layout.block_rows) + triton.cdiv(rows2, layout.block_rows),)
    _gemv_kernel[grid](
        x, blocks, blocks2, pair_table(x.device), out, num_tokens, num_rows, rows2, cols, blocks.shape[1],
        blocks2.shape[1], KIND=int(kind), W=layout.words(kind), KIND2=int(kind2), W2=layout.words(kind2),
        L=layout.lanes, KS=layout.split, NT=layout.row_threads, R=layout.rows_per_thread, BLOCK_T=layout.block_t,
        EVEN_K=cols % STEP_COLS == 0, PARTS=1 if second is None else 2, num_warps=NUM_WARPS,
    )  # fmt: skip
    return out
