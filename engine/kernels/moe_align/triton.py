"""MoE alignment in one launch: a single program counts the pairs per expert (`tl.histogram`), lays the padded
runs out (`tl.cumsum`), names each block's expert, then places every pair at its expert's cursor plus its rank
among that expert's pairs in its chunk (a [CHUNK, CHUNK] comparison: the order within an expert stays the pairs'
order, as the reference's stable sort keeps it, so both give the same lists). The cursors live in a small global
scratch buffer, read and advanced once per chunk between barriers. No host sync, a grid of one: capturable."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.moe_align.reference import padded_capacity

CHUNK = 64  # pairs per pass


@triton.jit
def _align_kernel(
    ids_ptr,
    sorted_ptr,
    block_expert_ptr,
    padded_len_ptr,
    cursor_ptr,
    num_pairs,
    n_experts,
    capacity,
    BLOCK_M: tl.constexpr,
    E_BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
):
    experts = tl.arange(0, E_BLOCK)
    lanes = tl.arange(0, CHUNK)
    counts = tl.zeros([E_BLOCK], dtype=tl.int32)
    for start in range(0, num_pairs, CHUNK):
        ok = start + lanes < num_pairs
        ids = tl.load(ids_ptr + start + lanes, mask=ok, other=0).to(tl.int32)
        counts += tl.histogram(ids, E_BLOCK, mask=ok)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    tl.store(padded_len_ptr, tl.sum(padded, axis=0))
    tl.store(cursor_ptr + experts, ends - padded, mask=experts < n_experts)
    # block b's expert: how many experts' runs end at or before its first row (past the used length: the last)
    for first in range(0, capacity // BLOCK_M, CHUNK):
        blocks = first + lanes
        done = (ends[None, :] <= (blocks * BLOCK_M)[:, None]) & (experts < n_experts)[None, :]
        owner = tl.minimum(tl.sum(done.to(tl.int32), axis=1), n_experts - 1)
        tl.store(block_expert_ptr + blocks, owner, mask=blocks < capacity // BLOCK_M)
    for first in range(0, capacity, CHUNK):
        tl.store(sorted_ptr + first + lanes, num_pairs, mask=first + lanes < capacity)
    tl.debug_barrier()  # the cursors and the sentinels are in place
    earlier = lanes[None, :] < lanes[:, None]  # [i, j]: pair j comes before pair i in the chunk
    for start in range(0, num_pairs, CHUNK):
        ok = start + lanes < num_pairs
        ids = tl.load(ids_ptr + start + lanes, mask=ok, other=0).to(tl.int32)
        same = (ids[:, None] == ids[None, :]) & ok[None, :]
        rank = tl.sum((same & earlier).to(tl.int32), axis=1)
        last = tl.sum((same & tl.trans(earlier)).to(tl.int32), axis=1) == 0  # no later pair of its expert
        place = tl.load(cursor_ptr + ids, mask=ok, other=0) + rank
        tl.debug_barrier()  # every pair read its cursor before any moves
        tl.store(sorted_ptr + place, (start + lanes).to(tl.int32), mask=ok)
        tl.store(cursor_ptr + ids, place + 1, mask=ok & last)
        tl.debug_barrier()


def moe_align(
    topk_ids: torch.Tensor, n_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Same contract as `reference.moe_align`."""
    flat = topk_ids.reshape(-1).contiguous()
    num_pairs = flat.numel()
    capacity = padded_capacity(num_pairs, n_experts, block_m)
    device = flat.device
    sorted_pairs = torch.empty(capacity, dtype=torch.int32, device=device)
    block_expert = torch.empty(capacity // block_m, dtype=torch.int32, device=device)
    padded_len = torch.empty(1, dtype=torch.int32, device=device)
    cursor = torch.empty(n_experts, dtype=torch.int32, device=device)
    _align_kernel[(1,)](
        flat, sorted_pairs, block_expert, padded_len, cursor, num_pairs, n_experts, capacity,
        BLOCK_M=block_m, E_BLOCK=triton.next_power_of_2(n_experts), CHUNK=CHUNK, num_warps=4,
    )  # fmt: skip
    return sorted_pairs, block_expert, padded_len
