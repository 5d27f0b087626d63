"""Decode's q/k norm + RoPE with the cache writes folded in: one launch (interpreted) vs the torch reference.

q, k, v are views of the fused qkv projection as the attention layer has them; the kernel writes k (normed and
rotated) and v into the caches' rows [slot, head, position] and nothing else, and returns q as `qk_norm_rope`.
"""

from __future__ import annotations

import pytest
import torch

from engine.kernels.qk_norm_rope import reference, triton
from tests.kernels.numerics import assert_close
from tests.kernels.test_qk_norm_rope import RATIO, _rope
from tests.kernels.test_strided_views import spy_on

pytestmark = pytest.mark.usefixtures("poisoned_allocations")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("tokens", "heads", "kv_heads", "dim", "rot"), [(1, 4, 2, 32, 8), (3, 3, 1, 48, 12)])
def test_cache_rows_written_in_the_same_launch(tokens, heads, kv_heads, dim, rot, dtype, monkeypatch) -> None:
    slots_total, length = 4, 9
    qkv = torch.randn(tokens, heads * 2 * dim + 2 * kv_heads * dim + 5).to(dtype)
    q_gate, k, v = qkv[:, :-5].split([heads * 2 * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q = q_gate.reshape(tokens, heads, 2 * dim)[..., :dim]
    k, v = k.reshape(tokens, kv_heads, dim), v.reshape(tokens, kv_heads, dim)
    q_w, k_w = (0.1 * torch.randn(dim)).to(dtype), (0.1 * torch.randn(dim)).to(dtype)
    cos, sin = _rope(tokens, rot, dtype)
    slots = torch.tensor([3, 0, 2][:tokens])
    positions = torch.tensor([8, 2, 5][:tokens])
    # One layer's view of a [layers, S, KV, L, D] cache, as `cache.keys[i]` is.
    keys0 = torch.randn(2, slots_total, kv_heads, length, dim).to(dtype)
    values0 = torch.randn(2, slots_total, kv_heads, length, dim).to(dtype)
    spy = spy_on(monkeypatch, triton, "_qk_norm_rope_kernel")
    keys, values = keys0.clone(), values0.clone()
    q_out = triton.qk_norm_rope_to_cache(
        q, k, v, q_w, k_w, cos, sin, 1e-6, keys[1], values[1], slots, positions
    )
    keys_ref, values_ref = keys0.clone(), values0.clone()
    q_ref = reference.qk_norm_rope_to_cache(
        q, k, v, q_w, k_w, cos, sin, 1e-6, keys_ref[1], values_ref[1], slots, positions
    )
    assert len(spy.launches) == 1 and spy.received(k) and spy.received(v), "one launch on the views"
    assert_close(q_out, q_ref, RATIO[dtype], "q")
    written = torch.zeros(2, slots_total, kv_heads, length, dtype=torch.bool)
    written[1, slots, :, positions] = True
    assert_close(keys[written], keys_ref[written], RATIO[dtype], "k in the cache")
    assert torch.equal(values[written], values_ref[written]), "v is copied exactly"
    assert torch.equal(keys[~written], keys0[~written]) and torch.equal(values[~written], values0[~written])
