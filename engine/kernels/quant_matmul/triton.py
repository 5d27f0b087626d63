"""`x @ W.T` with W in GGUF blocks, dequantized inside the K loop (fp32 accumulation): nothing but the blocks is
read from memory for W.

Two shapes of kernel, picked by the number of tokens T:
- decode (T <= GEMV_MAX_TOKENS): the packed GEMV of `gemv.py`, one program per few rows streaming their blocks
  once for all T tokens, decoding 32-bit (16-bit) words and reducing once per output row at the end.
- `_gemm_kernel` (prefill): [BLOCK_M tokens, BLOCK_N rows] tiles, each decoded weight tile [32, BLOCK_N] (rounded
  to x.dtype, as the reference's dequantized weight is) feeding `tl.dot`. Program id 0 runs over token blocks
  fastest, so programs decoding the same weight rows run together and share them in L2.
The GEMM's K loop (`tile_dot`) is a helper the quantized MoE kernels call too. Sizes are chosen from shapes on
the host: no autotuning (the interpreter has no driver) and no host sync, so both paths can be captured in a CUDA
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
from engine.kernels.quant_matmul.gemv import GEMV_MAX_TOKENS, quant_gemv
from engine.quant.formats import GGMLType

# The interpreter multiplies bf16 bit patterns in tl.dot (silently wrong), so it gets fp32 operands instead.
_INTERPRETING = settings.triton_interpret()  # fixed when the module loads, as Triton's own decoration is
_FLOAT_KINDS = {torch.float32: GGMLType.F32, torch.float16: GGMLType.F16, torch.bfloat16: GGMLType.BF16}


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
    stride_out,
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
        out_ptr + tokens.to(tl.int64)[:, None] * stride_out + rows[None, :],
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


def quant_matmul_parts(x: torch.Tensor, parts: list[tuple[torch.Tensor, int]], cols: int) -> torch.Tensor:
    """Same contract as `reference.quant_matmul_parts`: two quantized parts at decode sizes in one GEMV launch
    writing one output; above them every part's GEMM writes its columns of one output (no `cat`); anything else
    part by part."""
    weights = [as_blocks(blocks, kind, cols) for blocks, kind in parts]
    num_tokens = x.shape[0]
    if num_tokens == 0 or not all(w is not None and w[1] != _FLOAT_KINDS.get(x.dtype) for w in weights):
        return reference.quant_matmul_parts(x, parts, cols, matmul=quant_matmul)
    x = x.contiguous()
    if num_tokens <= GEMV_MAX_TOKENS:
        if len(parts) == 2:
            return quant_gemv(x, *weights[0], cols, second=weights[1])
        return reference.quant_matmul_parts(x, parts, cols, matmul=quant_matmul)
    out = torch.empty(num_tokens, sum(w[0].shape[0] for w in weights), dtype=x.dtype, device=x.device)
    start = 0
    for blocks, kind in weights:
        quant_gemm(x, blocks, kind, cols, out=out[:, start : start + blocks.shape[0]])
        start += blocks.shape[0]
    return out


def gemm_config(num_tokens: int, kind: int, arch: int) -> dict[str, int]:
    """Tile and launch options of the GEMM for `num_tokens` tokens on capability `arch` (see `tiles.py`)."""
    if _INTERPRETING:
        return dict(BLOCK_M=16, BLOCK_N=64, num_warps=4)
    return tiles.launch_config(tiles.MEDIUM if num_tokens <= 64 else tiles.LARGE, (kind,), arch)


def quant_gemm(
    x: torch.Tensor, blocks: torch.Tensor, kind: int, cols: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The prefill path (see the module docstring). `out` [T, N] (unit column stride: a column slice of a fused
    projection's output) is written instead of a new tensor."""
    num_tokens, num_rows = x.shape[0], blocks.shape[0]
    type_size, subs = geometry(kind)
    cfg = gemm_config(num_tokens, kind, launch_arch(x.device))
    block_m, block_n = cfg["BLOCK_M"], cfg["BLOCK_N"]
    if out is None:
        out = torch.empty(num_tokens, num_rows, dtype=x.dtype, device=x.device)
    elif out.shape != (num_tokens, num_rows) or out.stride(-1) != 1:
        raise ValueError(
            f"out must be [{num_tokens}, {num_rows}] with unit column stride, got {tuple(out.shape)}"
        )
    _gemm_kernel[(triton.cdiv(num_tokens, block_m), triton.cdiv(num_rows, block_n))](
        x, blocks, value_table(x.device), out, num_tokens, num_rows, cols, blocks.shape[1], out.stride(0),
        KIND=int(kind), TYPE_SIZE=type_size, SUBS=subs, UPCAST=_INTERPRETING and x.dtype == torch.bfloat16, **cfg,
    )  # fmt: skip
    return out
