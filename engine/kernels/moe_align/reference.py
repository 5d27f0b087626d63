"""Pairs sorted by expert, each expert's run padded to a multiple of `block_m`, in plain torch ops (no host sync,
so it can be captured in a CUDA graph; about fifteen small kernels on a GPU, which the Triton kernel replaces)."""

from __future__ import annotations

import torch


def padded_capacity(num_pairs: int, n_experts: int, block_m: int) -> int:
    """Length of the sorted list: every pair, plus at most block_m - 1 padding per expert that has pairs, rounded
    up to whole blocks. Known on the host, so the grid never depends on the routing."""
    most = num_pairs + min(num_pairs, n_experts) * (block_m - 1)
    return (most + block_m - 1) // block_m * block_m


def moe_align(
    topk_ids: torch.Tensor, n_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """topk_ids [T, K] -> sorted_pairs int32 [capacity] (flat pair index t*K + j, stable within an expert; the
    sentinel T*K in padding and after the used length), block_expert int32 [capacity // block_m] (the expert of
    each block of the sorted list; the last expert for blocks past the used length), padded_len int32 [1] (the
    used length, on the device)."""
    flat = topk_ids.reshape(-1)
    num_pairs = flat.numel()
    device = flat.device
    capacity = padded_capacity(num_pairs, n_experts, block_m)
    counts = torch.zeros(n_experts, dtype=torch.int64, device=device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded_counts = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded_counts, 0)
    padded_start = padded_end - padded_counts
    order = torch.argsort(flat, stable=True)
    sorted_experts = flat[order]
    rank_in_expert = (
        torch.arange(num_pairs, device=device) - (torch.cumsum(counts, 0) - counts)[sorted_experts]
    )
    sorted_pairs = torch.full((capacity,), num_pairs, dtype=torch.int32, device=device)
    sorted_pairs[padded_start[sorted_experts] + rank_in_expert] = order.to(torch.int32)
    block_starts = torch.arange(0, capacity, block_m, device=device)
    block_expert = torch.searchsorted(padded_end, block_starts, right=True).clamp_(max=n_experts - 1)
    return sorted_pairs, block_expert.to(torch.int32), padded_end[-1:].to(torch.int32)
