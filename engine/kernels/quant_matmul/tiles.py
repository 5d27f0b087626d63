"""Launch configurations of the kernels that decode GGUF blocks inside a `tl.dot` K loop (`tile_dot`: the prefill
GEMM of quant_matmul, the grouped gate/up and down GEMMs of quant_moe), per card.

Software pipelining (`num_stages`) prefetches the next K steps' weight bytes into shared memory, and how much that
takes depends on the block type as much as on the tile: the 8 sub-tiles of a 256-weight super-block are unrolled,
and each of their byte loads (IQ4_XS also its table lookups) gets its own buffer per stage. Measured on the
[64 x 128] tile with 8 warps (`python -m engine.kernels.aot`, triton 3.9; sm_90 / sm_89), bytes per block:

| type | 1 stage | 2 stages | 3 stages |
| --- | --- | --- | --- |
| IQ4_XS | 16,384 / 16,384 | 212,992 / 180,224 | 241,664 / 196,736 |
| Q5_K | 16,384 / 16,384 | 98,304 / 53,376 | 151,552 / 106,624 |
| Q4_K | 16,384 / 16,384 | 94,208 / 49,280 | 143,360 / 98,432 |
| Q6_K | 16,384 / 16,384 | 77,824 / 36,864 | 110,592 / 69,632 (spills on sm_89) |
| MXFP4 | 32,768 / 32,768 | 57,344 / 53,248 | 77,824 / 73,728 |
| Q8_0 | 16,384 / 16,384 | 16,384 / 16,384 | 20,480 / 16,384 |

Three stages (Triton's default) unless they do not fit: on the [64 x 128] tile a card with 227 KB per block
(H100/H200, B200) runs IQ4_XS with 2; every other card (99 KB: RTX 3090/4090/5090, A10, L40S; the A100's 163 KB
takes this row too) runs IQ4_XS with 1 and the K-quants with 2 (Q4_K's 3 leave under 3 KB, Q6_K's spill). The
smaller tiles fit with 3 (IQ4_XS [32 x 64]: 98,368 B). The ahead-of-time check compiles every configuration this
chooses for sm_90/89/86/120 and fails on any that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.kernels.arch import shared_memory_per_block
from engine.quant.formats import GGMLType

# Per-block shared memory from which a card takes the large-memory stage counts (H100's 232,448 B).
_LARGE_SHARED = 200_000


@dataclass(frozen=True)
class Tile:
    """[block_m rows of the activation, block_n weight rows] per program, with num_warps warps."""

    block_m: int
    block_n: int
    num_warps: int


SMALL = Tile(16, 64, 4)
MEDIUM = Tile(32, 64, 4)
LARGE = Tile(64, 128, 8)

# (tile, type) -> stages on (large-memory cards, the others), where three do not fit.
_FEWER_STAGES = {
    (LARGE, GGMLType.IQ4_XS): (2, 1),
    (LARGE, GGMLType.Q5_K): (3, 2),
    (LARGE, GGMLType.Q4_K): (3, 2),
    (LARGE, GGMLType.Q6_K): (3, 2),
}


def stages(tile: Tile, kinds: tuple[int, ...], arch: int) -> int:
    """Pipeline stages for a K loop over `tile` decoding blocks of `kinds` (gate and up may differ) on `arch`."""
    column = 0 if shared_memory_per_block(arch) >= _LARGE_SHARED else 1
    return min(_FEWER_STAGES.get((tile, GGMLType(kind)), (3, 3))[column] for kind in kinds)


# (tile, type) -> warps, where the tile's own spill: Q6_K decodes each weight from two loads, and on the [32 x 64]
# tile over 4 warps the grouped gate/up and down kernels spilled 64-128 B (sm_86/89/90/120); over 8, none. Q5_K's
# [16 x 64] gate/up (decode batches of 17-32 tokens) spilled 20 B on sm_120 under Triton 3.6 over 4.
_MORE_WARPS = {(MEDIUM, GGMLType.Q6_K): 8, (SMALL, GGMLType.Q5_K): 8}


def launch_config(tile: Tile, kinds: tuple[int, ...], arch: int) -> dict[str, int]:
    """The kernel's BLOCK_M, BLOCK_N and launch options."""
    warps = max(_MORE_WARPS.get((tile, GGMLType(kind)), tile.num_warps) for kind in kinds)
    return dict(
        BLOCK_M=tile.block_m, BLOCK_N=tile.block_n, num_warps=warps, num_stages=stages(tile, kinds, arch)
    )
