"""`x @ W.T` for a weight W kept in GGUF blocks: dequantize a chunk of rows, multiply, next chunk.

The chunk bounds the dequantized temporary (`CHUNK_WEIGHTS` weights, 4 MB in fp32) whatever the weight's size, so
a 248k-row vocabulary head is never dequantized whole, and each chunk is still in cache when the matmul reads it.
This is the CPU path of a GGUF model (the Triton kernel, which dequantizes inside its K loop, is the GPU one)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from engine.kernels.dequantize.reference import dequantize, float_values
from engine.quant.formats import FLOAT_TYPES, GGMLType

# Dequantized weights per chunk. On the 2-core box (2048 x 2048 Q4_K, 2 threads) 1M was the fastest of 256k, 512k,
# 1M, 2M and the whole 4M: 1.5 ms against 2.0-2.7 at T=1, 2.7 against 3.0-4.1 at T=8 (smaller chunks pay the ~15
# ops' per-call cost more often; larger ones fall out of the 2 MB L2s).
CHUNK_WEIGHTS = 1 << 20


def quant_matmul(x: torch.Tensor, blocks: torch.Tensor, kind: int, cols: int) -> torch.Tensor:
    """x [T, cols] float; blocks uint8 [N, row_bytes(kind, cols)] -> x @ W.T, [T, N] in x.dtype.

    W is dequantized to x.dtype (as a float weight of that dtype would be stored), the product accumulated by
    torch's matmul. A float weight (its bytes, or the float tensor itself) already in x.dtype is multiplied in
    place."""
    kind = GGMLType(kind)
    if kind in FLOAT_TYPES and float_values(blocks, kind).dtype == x.dtype:
        return F.linear(x, float_values(blocks, kind))
    rows = blocks.shape[0]
    step = max(1, CHUNK_WEIGHTS // cols)
    if rows <= step:
        return F.linear(x, dequantize(blocks, kind, cols, x.dtype))
    out = x.new_empty(x.shape[0], rows)
    for start in range(0, rows, step):
        weight = dequantize(blocks[start : start + step], kind, cols, x.dtype)
        torch.mm(x, weight.t(), out=out[:, start : start + step])
    return out


def quant_matmul_parts(
    x: torch.Tensor,
    parts: list[tuple[torch.Tensor, int]],
    cols: int,
    matmul: Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor] = quant_matmul,
) -> torch.Tensor:
    """x @ W.T for a weight stored as row ranges of different types (a fused projection): parts [(blocks, kind)]
    -> [T, sum of rows], each part's product by `matmul` (this reference's, or a faster path's), side by side."""
    return torch.cat([matmul(x, blocks, kind, cols) for blocks, kind in parts], dim=-1)
