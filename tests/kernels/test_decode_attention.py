"""Split-K decode attention over the slot cache: Triton (interpreted) vs the torch reference (masked SDPA)."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.decode_attention import reference, triton
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

RATIO = {torch.float32: 1e-5, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim", "length", "positions", "slots"),
    [
        (4, 2, 32, 40, [0], [1]),  # the first token: one key
        (
            8,
            2,
            16,
            70,
            [69, 3, 33],
            [2, 0, 3],
        ),  # cache full to its end; short; a split boundary; gathered slots
        (2, 2, 48, 24, [5, 5], [0, 1]),  # plain MHA, D not a power of two
    ],
)
def test_decode_attention_matches_masked_sdpa(heads, kv_heads, dim, length, positions, slots, dtype) -> None:
    gen = torch.Generator().manual_seed(length)
    keys = torch.randn(5, kv_heads, length, dim, generator=gen).to(dtype)
    values = torch.randn(5, kv_heads, length, dim, generator=gen).to(dtype)
    # q as attention has it: a strided view, each head's query beside its gate.
    q = torch.randn(len(slots), heads, 2 * dim, generator=gen).to(dtype)[..., :dim]
    slot_ids, pos = torch.tensor(slots), torch.tensor(positions)
    got = triton.decode_attention(q, keys, values, slot_ids, pos)
    want = reference.decode_attention(q.float(), keys.float(), values.float(), slot_ids, pos).to(dtype)
    assert got.shape == (len(slots), heads, dim)
    assert_close(got, want, RATIO[dtype], "o")
    # The reference with a host-known span reads less and gives the same.
    span = max(positions) + 1
    short = reference.decode_attention(q.float(), keys.float(), values.float(), slot_ids, pos, span)
    assert_close(short.to(dtype), want, RATIO[dtype], "o with a span")


def _inputs(batch: int, heads: int, kv_heads: int, dim: int, length: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(batch, kv_heads, length, dim, generator=gen)
    values = torch.randn(batch, kv_heads, length, dim, generator=gen)
    q = torch.randn(batch, heads, dim, generator=gen)
    return q, keys, values, torch.arange(batch)


def test_short_contexts_in_a_long_cache() -> None:
    """Contexts of 1, 37 and 300 keys in a 2,048-key cache, each split over its own length."""
    q, keys, values, slots = _inputs(3, 4, 2, 32, 2048)
    pos = torch.tensor([0, 36, 299])
    got = triton.decode_attention(q, keys, values, slots, pos)
    assert_close(got, reference.decode_attention(q, keys, values, slots, pos), RATIO[torch.float32], "o")


def test_every_split_works_on_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """The splits divide the context, not the cache: a 300-key context in a 4,096-key cache keeps
    min(splits, 300 / BLOCK_N) splits busy (capacity-sized splits of 64 left all but five empty)."""
    made: list[torch.Tensor] = []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: made.append(real_empty(*a, **k)) or made[-1])
    q, keys, values, slots = _inputs(1, 2, 2, 16, 4096)
    triton.decode_attention(q, keys, values, slots, torch.tensor([299]))
    part_m = made[[t.dim() for t in made].index(4) + 1]  # after the partial outputs [B, H, SPLITS, D]
    splits = part_m.shape[-1]
    block_n = 16  # the interpreter's
    busy = int(torch.isfinite(part_m[0, 0]).sum())
    assert splits == triton.split_count(2, 4096, block_n) == 64
    assert busy == min(splits, -(-300 // block_n)) == 19


def test_span_caps_the_splits() -> None:
    """A host-known span of 40 keys (three blocks of 16) caps the splits at four, a power of two like every split
    count (one compile per count); the result is the same."""
    counts = {triton.split_count(2, span, 16) for span in range(1, 5000)}
    assert triton.split_count(2, 40, 16) == 4 and counts == {1, 2, 4, 8, 16, 32, 64}
    assert triton.split_count(64, 32768, 64) == 4
    q, keys, values, slots = _inputs(1, 4, 2, 32, 512, seed=1)
    pos = torch.tensor([39])
    want = reference.decode_attention(q, keys, values, slots, pos)
    assert_close(triton.decode_attention(q, keys, values, slots, pos, span=40), want, 1e-5, "with span")
