"""MoE alignment: the torch reference's invariants (every pair once, runs padded to whole blocks, each block's
expert), and the one-launch Triton kernel (interpreted) giving exactly the reference's lists."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.moe_align import reference, triton

CASES = [
    (1, 8, 2, 16),  # batch-1 decode
    (13, 6, 3, 4),  # experts not a power of two
    (32, 256, 8, 16),  # batch-32 decode at the released model's 256 experts, top-8: four chunks of pairs
    (50, 5, 2, 64),  # prefill-sized blocks
]


def _routing(tokens: int, n_experts: int, k: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(tokens, n_experts, generator=gen).topk(k, dim=-1).indices


@pytest.mark.parametrize(("tokens", "n_experts", "k", "block"), CASES)
def test_reference_invariants(tokens: int, n_experts: int, k: int, block: int) -> None:
    ids = _routing(tokens, n_experts, k, seed=tokens)
    sorted_pairs, block_expert, padded_len = reference.moe_align(ids, n_experts, block)
    used = int(padded_len.item())
    flat = ids.reshape(-1)
    pairs = sorted_pairs[:used].long()
    real = pairs < flat.numel()
    # Every pair appears exactly once, in pair order within its expert; padding (the sentinel) fills the rest.
    assert torch.equal(pairs[real].sort().values, torch.arange(flat.numel()))
    assert (sorted_pairs[used:] == flat.numel()).all()
    counts = torch.bincount(flat, minlength=n_experts)
    assert used == int(((counts + block - 1) // block * block).sum())
    owner = block_expert.long().repeat_interleave(block)[:used]
    assert torch.equal(
        flat[pairs[real]], owner[real]
    )  # every real pair in block b belongs to block_expert[b]
    for expert in range(n_experts):
        mine = pairs[real][flat[pairs[real]] == expert]
        assert torch.equal(mine, mine.sort().values)


@pytest.mark.parametrize(("tokens", "n_experts", "k", "block"), CASES)
def test_kernel_equals_reference(tokens: int, n_experts: int, k: int, block: int) -> None:
    ids = _routing(tokens, n_experts, k, seed=tokens + 1)
    got_all, want_all = triton.moe_align(ids, n_experts, block), reference.moe_align(ids, n_experts, block)
    for got, want in zip(got_all, want_all, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_all_pairs_on_one_expert() -> None:
    """One expert takes every pair (a run over many chunks and blocks); the other experts stay empty."""
    ids = torch.full((150, 1), 3)
    for got, want in zip(triton.moe_align(ids, 4, 16), reference.moe_align(ids, 4, 16), strict=True):
        assert torch.equal(got, want)
