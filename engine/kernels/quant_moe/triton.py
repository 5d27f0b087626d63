"""Routed SwiGLU experts in Triton with the expert weights in GGUF blocks: fused_moe's two paths (see
`engine/kernels/fused_moe/triton.py`). Only the routed experts' blocks are read; nothing is synchronised with the
host, so both paths can be captured in a CUDA graph.

- Decode (at most `PAIR_PATH_MAX_PAIRS` (token, expert) pairs): `pairs.py`, two packed-GEMV kernels on the routing
  as it is, the down projection over all of a token's experts at once.
- Prefill: pairs sorted by expert and padded to BLOCK_M runs (`engine/kernels/moe_align`, shared with fused_moe),
  then `_gate_up_kernel` and `_down_kernel` as grouped GEMMs over [BLOCK_M pairs, BLOCK_N rows] tiles with `tl.dot`
  (each weight tile decoded in the K loop by the quantized matmul's `tile_dot`), and a torch sum over each token's
  K outputs.
Roundings follow the reference (gate and up rounded to x.dtype before the SiLU, each expert output and router
weight rounded to x.dtype), as fused_moe's kernels do.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine import settings
from engine.kernels.arch import launch_arch
from engine.kernels.dequantize.triton import as_blocks, geometry, value_table
from engine.kernels.moe_align.triton import moe_align
from engine.kernels.quant_matmul import tiles
from engine.kernels.quant_matmul.triton import tile_dot
from engine.kernels.quant_moe import reference
from engine.kernels.quant_moe.pairs import routed_pairs as quant_moe_pairs

_INTERPRETING = settings.triton_interpret()  # fixed when the module loads, as Triton's own decoration is
# Up to this many (token, expert) pairs decode takes the pair path (fused_moe's first guess, same reasoning).
PAIR_PATH_MAX_PAIRS = 144


@triton.jit
def _silu_mul(gate, up, dtype: tl.constexpr):
    """silu(gate) * up with gate and up first rounded to `dtype`, as the torch path computes them."""
    gate = gate.to(dtype).to(tl.float32)
    up = up.to(dtype).to(tl.float32)
    return gate * tl.sigmoid(gate) * up


# num_pairs only bounds a mask: specialising it (divisible by 16 or not) would compile each kernel twice.
@triton.jit(do_not_specialize=["num_pairs"])
def _gate_up_kernel(
    x_ptr,
    gate_ptr,
    up_ptr,
    lut_ptr,
    act_ptr,
    sorted_pair_ptr,
    block_expert_ptr,
    padded_len_ptr,
    num_pairs,
    hidden,
    inter,
    gate_row_bytes,
    up_row_bytes,
    TOP_K: tl.constexpr,
    GATE_KIND: tl.constexpr,
    GATE_TYPE_SIZE: tl.constexpr,
    GATE_SUBS: tl.constexpr,
    UP_KIND: tl.constexpr,
    UP_TYPE_SIZE: tl.constexpr,
    UP_SUBS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    if pid_m * BLOCK_M >= tl.load(padded_len_ptr):
        return
    pairs = tl.load(sorted_pair_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    pair_ok = pairs < num_pairs
    a_offs = (pairs // TOP_K).to(tl.int64)[:, None] * hidden
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < inter
    expert_rows = expert * inter + cols.to(tl.int64)[None, :]
    gate = tile_dot(
        x_ptr, a_offs, pair_ok[:, None], gate_ptr, lut_ptr, expert_rows * gate_row_bytes, col_ok[None, :],
        hidden, GATE_KIND, GATE_TYPE_SIZE, GATE_SUBS, BLOCK_M, BLOCK_N, UPCAST,
    )  # fmt: skip
    up = tile_dot(
        x_ptr, a_offs, pair_ok[:, None], up_ptr, lut_ptr, expert_rows * up_row_bytes, col_ok[None, :],
        hidden, UP_KIND, UP_TYPE_SIZE, UP_SUBS, BLOCK_M, BLOCK_N, UPCAST,
    )  # fmt: skip
    act = _silu_mul(gate, up, act_ptr.dtype.element_ty)
    tl.store(
        act_ptr + pairs.to(tl.int64)[:, None] * inter + cols[None, :],
        act.to(act_ptr.dtype.element_ty),
        mask=pair_ok[:, None] & col_ok[None, :],
    )


@triton.jit(do_not_specialize=["num_pairs"])
def _down_kernel(
    act_ptr,
    down_ptr,
    lut_ptr,
    out_ptr,
    pair_weight_ptr,
    sorted_pair_ptr,
    block_expert_ptr,
    padded_len_ptr,
    num_pairs,
    hidden,
    inter,
    down_row_bytes,
    DOWN_KIND: tl.constexpr,
    DOWN_TYPE_SIZE: tl.constexpr,
    DOWN_SUBS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    if pid_m * BLOCK_M >= tl.load(padded_len_ptr):
        return
    pairs = tl.load(sorted_pair_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    pair_ok = pairs < num_pairs
    pairs = pairs.to(tl.int64)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < hidden
    acc = tile_dot(
        act_ptr, pairs[:, None] * inter, pair_ok[:, None], down_ptr, lut_ptr,
        (expert * hidden + cols.to(tl.int64)[None, :]) * down_row_bytes, col_ok[None, :],
        inter, DOWN_KIND, DOWN_TYPE_SIZE, DOWN_SUBS, BLOCK_M, BLOCK_N, UPCAST,
    )  # fmt: skip
    # The torch path rounds the expert output to x.dtype, then multiplies by the (x.dtype) router weight.
    y = acc.to(out_ptr.dtype.element_ty).to(tl.float32)
    pair_w = tl.load(pair_weight_ptr + pairs, mask=pair_ok, other=0.0).to(out_ptr.dtype.element_ty)
    tl.store(
        out_ptr + pairs[:, None] * hidden + cols[None, :],
        (y * pair_w.to(tl.float32)[:, None]).to(out_ptr.dtype.element_ty),
        mask=pair_ok[:, None] & col_ok[None, :],
    )


def _kind_args(prefix: str, kind: int) -> dict[str, int]:
    type_size, subs = geometry(kind)
    return {f"{prefix}_KIND": int(kind), f"{prefix}_TYPE_SIZE": type_size, f"{prefix}_SUBS": subs}


def quant_moe(
    x: torch.Tensor,
    gate: torch.Tensor,
    gate_kind: int,
    up: torch.Tensor,
    up_kind: int,
    down: torch.Tensor,
    down_kind: int,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """x [T, H]; gate, up uint8 [E, I, row_bytes(H)]; down uint8 [E, H, row_bytes(I)]; topk_weights [T, K] float,
    topk_ids [T, K] int64 -> [T, H] in x.dtype."""
    num_tokens, top_k = topk_ids.shape
    hidden, inter = x.shape[-1], gate.shape[1]
    if num_tokens * top_k == 0:
        return torch.zeros_like(x)
    gate_w = as_blocks(gate, gate_kind, hidden)
    up_w = as_blocks(up, up_kind, hidden)
    down_w = as_blocks(down, down_kind, inter)
    if gate_w is None or up_w is None or down_w is None:
        return reference.quant_moe(x, gate, gate_kind, up, up_kind, down, down_kind, topk_weights, topk_ids)
    path = quant_moe_pairs if num_tokens * top_k <= PAIR_PATH_MAX_PAIRS else quant_moe_grouped
    return path(x.contiguous(), *gate_w, *up_w, *down_w, topk_weights, topk_ids)


def block_config(num_pairs: int, kinds: tuple[int, ...], arch: int) -> dict[str, int]:
    """Larger M tiles as the pairs per expert grow (each decoded weight tile feeds more rows); the stages for
    `kinds` on capability `arch` (see `engine/kernels/quant_matmul/tiles.py`)."""
    if _INTERPRETING:
        return dict(BLOCK_M=16, BLOCK_N=64, num_warps=4)
    tile = tiles.SMALL if num_pairs <= 512 else tiles.MEDIUM if num_pairs <= 8192 else tiles.LARGE
    return tiles.launch_config(tile, kinds, arch)


def quant_moe_grouped(
    x: torch.Tensor,
    gate: torch.Tensor,
    gate_kind: int,
    up: torch.Tensor,
    up_kind: int,
    down: torch.Tensor,
    down_kind: int,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """The prefill path: sorted, block-aligned pairs and two grouped GEMMs (see the module docstring)."""
    num_tokens, top_k = topk_ids.shape
    n_experts, inter = gate.shape[0], gate.shape[1]
    hidden = x.shape[-1]
    num_pairs = num_tokens * top_k
    arch = launch_arch(x.device)
    cfg = block_config(num_pairs, (gate_kind, up_kind), arch)
    down_cfg = block_config(num_pairs, (down_kind,), arch)  # the same tile; its own stages
    block_m, block_n = cfg["BLOCK_M"], cfg["BLOCK_N"]
    sorted_pairs, block_expert, padded_len = moe_align(topk_ids, n_experts, block_m)
    m_blocks = block_expert.numel()
    upcast = _INTERPRETING and x.dtype == torch.bfloat16
    lut = value_table(x.device)

    act = torch.empty(num_pairs, inter, dtype=x.dtype, device=x.device)
    _gate_up_kernel[(m_blocks, triton.cdiv(inter, block_n))](
        x, gate, up, lut, act, sorted_pairs, block_expert, padded_len, num_pairs, hidden, inter,
        gate.shape[-1], up.shape[-1], TOP_K=top_k, **_kind_args("GATE", gate_kind), **_kind_args("UP", up_kind),
        UPCAST=upcast, **cfg,
    )  # fmt: skip
    per_pair = torch.empty(num_pairs, hidden, dtype=x.dtype, device=x.device)
    _down_kernel[(m_blocks, triton.cdiv(hidden, block_n))](
        act, down, lut, per_pair, topk_weights.contiguous(), sorted_pairs, block_expert, padded_len, num_pairs,
        hidden, inter, down.shape[-1], **_kind_args("DOWN", down_kind), UPCAST=upcast, **down_cfg,
    )  # fmt: skip
    return per_pair.view(num_tokens, top_k, hidden).sum(1)
