"""`x @ W.T` with W in GGUF blocks, dequantized inside the K loop (fp32 accumulation): nothing but the blocks is
read from memory for W.

Two shapes of kernel, picked by the number of tokens T:
- `_gemv_kernel` (decode, T <= GEMV_MAX_TOKENS): one program per BLOCK_N output rows (and per K split), streaming
  those rows' blocks once and reducing each decoded [BLOCK_N, 32] tile against all T tokens' x in registers
  (`tl.sum`). Memory-bound: the weight bytes are the traffic, so the grid is widened with split-K until it has
  about `GEMV_TARGET_PROGRAMS` programs (partial sums in an fp32 [splits, T, N] buffer, summed by one torch op).
- `_gemm_kernel` (prefill): [BLOCK_M tokens, BLOCK_N rows] tiles, each decoded weight tile [32, BLOCK_N] (rounded
  to x.dtype, as the reference's dequantized weight is) feeding `tl.dot`. Program id 0 runs over token blocks
  fastest, so programs decoding the same weight rows run together and share them in L2.
The K loops (`gemv_dot`, `tile_dot`) are helpers the quantized MoE kernels call too. Sizes are chosen from shapes
on the host: no autotuning (the interpreter has no driver) and no host sync, so both paths can be captured in a CUDA
graph. fp32 x is multiplied in full fp32 on both paths (`tl.dot(input_precision="ieee")`: no tf32), so an fp32
model matches the reference to fp32 rounding; bf16/fp16 x uses the tensor cores.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine import settings
from engine.kernels.arch import launch_arch
from engine.kernels.dequantize.triton import as_blocks, dequant_tile, geometry, value_table
from engine.kernels.quant_matmul import reference, tiles
from engine.quant.formats import GGMLType

# The interpreter multiplies bf16 bit patterns in tl.dot (silently wrong), so it gets fp32 operands instead.
_INTERPRETING = settings.triton_interpret()  # fixed when the module loads, as Triton's own decoration is
# Up to this many tokens the weight is streamed by the GEMV kernel (decode batches); beyond, tl.dot tiles win.
# A first guess from the register budget of a [T, BLOCK_N, 32] product, to be settled on a GPU.
GEMV_MAX_TOKENS = 16
# Split-K widens a GEMV grid to about this many programs (a few per SM on an H200's 132 or a 4090's 128).
GEMV_TARGET_PROGRAMS = 512
# Each K split covers at least this many columns (so the partial sums stay a small fraction of the traffic).
GEMV_MIN_SPLIT_COLS = 1024
_FLOAT_KINDS = {torch.float32: GGMLType.F32, torch.float16: GGMLType.F16, torch.bfloat16: GGMLType.BF16}


@triton.jit
def gemv_dot(
    x_ptr,
    x_offs,
    x_ok,
    w_ptr,
    lut_ptr,
    row_offs,
    row_ok,
    first_block,
    last_block,
    KIND: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    SUBS: tl.constexpr,
):
    """sum_k x[t, k] * W[n, k] over blocks [first_block, last_block): x rows at element offsets `x_offs` [T, 1],
    weight rows at byte offsets `row_offs` [N, 1] -> fp32 [T, N]."""
    c = tl.arange(0, 32)
    acc = tl.zeros([x_offs.shape[0], row_offs.shape[0]], dtype=tl.float32)
    for blk in range(first_block, last_block):
        base = row_offs + blk * TYPE_SIZE
        for j in tl.static_range(SUBS):
            w = dequant_tile(w_ptr, lut_ptr, base, row_ok, c[None, :], j, KIND)  # [N, 32]
            xk = tl.load(x_ptr + x_offs + (blk * SUBS + j) * 32 + c[None, :], mask=x_ok, other=0.0)
            acc += tl.sum(xk.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)
    return acc


@triton.jit
def tile_dot(
    a_ptr,
    a_offs,
    a_ok,
    w_ptr,
    lut_ptr,
    col_offs,
    col_ok,
    k_cols,
    KIND: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    SUBS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """a [BLOCK_M, K] (rows at element offsets `a_offs` [BLOCK_M, 1]) @ W.T for the BLOCK_N weight rows at byte
    offsets `col_offs` [1, BLOCK_N] -> fp32 [BLOCK_M, BLOCK_N]; each weight tile rounded to a's dtype first."""
    c = tl.arange(0, 32)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for blk in range(0, k_cols // (SUBS * 32)):
        base = col_offs + blk * TYPE_SIZE
        for j in tl.static_range(SUBS):
            w = dequant_tile(w_ptr, lut_ptr, base, col_ok, c[:, None], j, KIND)  # [32, BLOCK_N]
            a = tl.load(a_ptr + a_offs + (blk * SUBS + j) * 32 + c[None, :], mask=a_ok, other=0.0)
            w = w.to(a_ptr.dtype.element_ty)
            if UPCAST:
                acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc)
            elif a_ptr.dtype.element_ty == tl.float32:
                acc = tl.dot(a, w, acc, input_precision="ieee")  # fp32 in, fp32 products (not tf32)
            else:
                acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    lut_ptr,
    out_ptr,
    num_tokens,
    num_rows,
    cols,
    row_bytes,
    blocks_per_split,
    KIND: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    SUBS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    row_ok = rows < num_rows
    tokens = tl.arange(0, BLOCK_T)
    token_ok = tokens < num_tokens
    first = split * blocks_per_split
    last = tl.minimum(first + blocks_per_split, cols // (SUBS * 32))
    acc = gemv_dot(
        x_ptr, tokens.to(tl.int64)[:, None] * cols, token_ok[:, None], w_ptr, lut_ptr,
        rows.to(tl.int64)[:, None] * row_bytes, row_ok[:, None], first, last, KIND, TYPE_SIZE, SUBS,
    )  # fmt: skip
    # out is [T, N] in x.dtype, or the fp32 partial sums [splits, T, N]
    out = out_ptr + split.to(tl.int64) * num_tokens * num_rows
    tl.store(
        out + tokens[:, None] * num_rows + rows[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=token_ok[:, None] & row_ok[None, :],
    )


# num_tokens only bounds a mask: specialising it (divisible by 16 or not) would compile the kernel twice.
@triton.jit(do_not_specialize=["num_tokens"])
def _gemm_kernel(
    x_ptr,
    w_ptr,
    lut_ptr,
    out_ptr,
    num_tokens,
    num_rows,
    cols,
    row_bytes,
    KIND: tl.constexpr,
    TYPE_SIZE: tl.constexpr,
    SUBS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    tokens = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    token_ok = tokens < num_tokens
    row_ok = rows < num_rows
    acc = tile_dot(
        x_ptr, tokens.to(tl.int64)[:, None] * cols, token_ok[:, None], w_ptr, lut_ptr,
        rows.to(tl.int64)[None, :] * row_bytes, row_ok[None, :], cols,
        KIND, TYPE_SIZE, SUBS, BLOCK_M, BLOCK_N, UPCAST,
    )  # fmt: skip
    tl.store(
        out_ptr + tokens.to(tl.int64)[:, None] * num_rows + rows[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=token_ok[:, None] & row_ok[None, :],
    )


def quant_matmul(x: torch.Tensor, blocks: torch.Tensor, kind: int, cols: int) -> torch.Tensor:
    """x [T, cols] float; blocks uint8 [N, row_bytes(kind, cols)] -> x @ W.T, [T, N] in x.dtype.

    A float weight already in x.dtype goes to the reference (a view and one cuBLAS matmul)."""
    num_tokens, num_rows = x.shape[0], blocks.shape[0]
    weight = as_blocks(blocks, kind, cols)
    if weight is None or weight[1] == _FLOAT_KINDS.get(x.dtype) or num_tokens == 0 or num_rows == 0:
        return reference.quant_matmul(x, blocks, kind, cols)
    x = x.contiguous()
    if num_tokens <= GEMV_MAX_TOKENS:
        return quant_gemv(x, *weight, cols)
    return quant_gemm(x, *weight, cols)


def gemv_splits(num_programs: int, num_blocks: int, block_cols: int) -> int:
    """K splits for a GEMV grid of `num_programs` row blocks: enough to fill the GPU, each split at least
    GEMV_MIN_SPLIT_COLS columns."""
    wanted = max(1, GEMV_TARGET_PROGRAMS // num_programs)
    most = max(1, num_blocks * block_cols // GEMV_MIN_SPLIT_COLS)
    return min(wanted, most, num_blocks)


def quant_gemv(
    x: torch.Tensor, blocks: torch.Tensor, kind: int, cols: int, splits: int | None = None
) -> torch.Tensor:
    """The decode path (see the module docstring); `splits` overrides the split-K choice (tests)."""
    num_tokens, num_rows = x.shape[0], blocks.shape[0]
    type_size, subs = geometry(kind)
    num_blocks = cols // (32 * subs)
    block_t = triton.next_power_of_2(num_tokens)
    # The interpreter pays per op, not per element: few wide programs.
    block_n = 128 if _INTERPRETING else 32 if num_tokens <= 4 else 16
    row_programs = triton.cdiv(num_rows, block_n)
    if splits is None:
        splits = gemv_splits(row_programs, num_blocks, 32 * subs)
    per_split = triton.cdiv(num_blocks, splits)
    splits = triton.cdiv(num_blocks, per_split)
    if splits == 1:
        out = torch.empty(num_tokens, num_rows, dtype=x.dtype, device=x.device)
    else:
        out = torch.empty(splits, num_tokens, num_rows, dtype=torch.float32, device=x.device)
    _gemv_kernel[(row_programs, splits)](
        x, blocks, value_table(x.device), out, num_tokens, num_rows, cols, blocks.shape[1], per_split,
        KIND=int(kind), TYPE_SIZE=type_size, SUBS=subs, BLOCK_T=block_t, BLOCK_N=block_n, num_warps=4,
    )  # fmt: skip
    return out if splits == 1 else out.sum(0).to(x.dtype)


def gemm_config(num_tokens: int, kind: int, arch: int) -> dict[str, int]:
    """Tile and launch options of the GEMM for `num_tokens` tokens on capability `arch` (see `tiles.py`)."""
    if _INTERPRETING:
        return dict(BLOCK_M=16, BLOCK_N=64, num_warps=4)
    return tiles.launch_config(tiles.MEDIUM if num_tokens <= 64 else tiles.LARGE, (kind,), arch)


def quant_gemm(x: torch.Tensor, blocks: torch.Tensor, kind: int, cols: int) -> torch.Tensor:
    """The prefill path (see the module docstring)."""
    num_tokens, num_rows = x.shape[0], blocks.shape[0]
    type_size, subs = geometry(kind)
    cfg = gemm_config(num_tokens, kind, launch_arch(x.device))
    block_m, block_n = cfg["BLOCK_M"], cfg["BLOCK_N"]
    out = torch.empty(num_tokens, num_rows, dtype=x.dtype, device=x.device)
    _gemm_kernel[(triton.cdiv(num_tokens, block_m), triton.cdiv(num_rows, block_n))](
        x, blocks, value_table(x.device), out, num_tokens, num_rows, cols, blocks.shape[1],
        KIND=int(kind), TYPE_SIZE=type_size, SUBS=subs, UPCAST=_INTERPRETING and x.dtype == torch.bfloat16, **cfg,
    )  # fmt: skip
    return out
