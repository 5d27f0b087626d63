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
