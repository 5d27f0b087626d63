"""Gated delta rule, chunked and recurrent Triton kernels (interpreted), against the torch token loop.

Shapes stay tiny (the interpreter runs one program at a time through numpy) but cover what matters: lengths that
are not multiples of the chunk, T=1, grouped value heads (HV = 2H), V not a power of two (two V blocks, masked),
packed variable-length batches, with and without an initial state, with and without the in-kernel l2norm.
"""

from __future__ import annotations

import pytest
import torch

from engine.kernels.gated_delta_rule import reference, triton
from engine.kernels.gated_delta_rule.gates import deltanet_gates
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

# fla's bounds: 5e-3 chunked, 2e-3 recurrent, for half-precision inputs; fp32 inputs get a much tighter one.
CHUNK_RATIO = {torch.float32: 1e-5, torch.float16: 5e-3}
RECURRENT_RATIO = {torch.float32: 1e-5, torch.float16: 2e-3}


def _inputs(
    batch: int, length: int, heads: int, heads_v: int, dim_k: int, dim_v: int, dtype: torch.dtype, l2: bool
):
    q = torch.randn(batch, length, heads, dim_k)
    k = torch.randn(batch, length, heads, dim_k)
    if not l2:  # without the in-kernel l2norm the caller passes unit keys (the delta rule needs |k| <= 1)
        q, k = reference.l2norm(q), reference.l2norm(k)
    v = torch.randn(batch, length, heads_v, dim_v)
    g = torch.nn.functional.logsigmoid(torch.randn(batch, length, heads_v))  # log-decay <= 0, fp32
    beta = torch.rand(batch, length, heads_v)
    return q.to(dtype), k.to(dtype), v.to(dtype), g, beta.to(dtype)


def _expected(q, k, v, g, beta, h0, cu, l2):
    # The ground truth in fp32 from the same (rounded) inputs, so only the kernel's own error is measured.
    return reference.recurrent_gated_delta_rule(
        q.float(), k.float(), v.float(), g, beta.float(), initial_state=h0, output_final_state=True,
        use_qk_l2norm_in_kernel=l2, cu_seqlens=cu,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize(
    ("batch", "length", "heads", "heads_v", "dim_k", "dim_v", "l2"),
    [(1, 1, 1, 2, 16, 16, True), (2, 70, 1, 2, 32, 48, True), (1, 64, 2, 2, 16, 32, False)],
)
def test_chunk(batch, length, heads, heads_v, dim_k, dim_v, l2, with_state, dtype) -> None:
    q, k, v, g, beta = _inputs(batch, length, heads, heads_v, dim_k, dim_v, dtype, l2)
    h0 = torch.randn(batch, heads_v, dim_k, dim_v) if with_state else None
    o, ht = triton.chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=l2
    )
    o_ref, ht_ref = _expected(q, k, v, g, beta, h0, None, l2)
    assert_close(o, o_ref.to(dtype), CHUNK_RATIO[dtype], "o")
    assert_close(ht, ht_ref, CHUNK_RATIO[dtype], "final state")


@pytest.mark.parametrize("with_state", [False, True])
def test_chunk_packed_sequences(with_state: bool) -> None:
    lengths = [5, 66, 1]
    cu = torch.tensor([0, 5, 71, 72], dtype=torch.int32)
    heads, heads_v, dim_k, dim_v = 1, 2, 16, 32
    q, k, v, g, beta = _inputs(1, sum(lengths), heads, heads_v, dim_k, dim_v, torch.float16, True)
    h0 = torch.randn(len(lengths), heads_v, dim_k, dim_v) if with_state else None
    o, ht = triton.chunk_gated_delta_rule(
        q,
        k,
        v,
        g,
        beta,
        initial_state=h0,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        cu_seqlens=cu,
    )
    o_ref, ht_ref = _expected(q, k, v, g, beta, h0, cu, True)
    assert_close(o, o_ref.half(), CHUNK_RATIO[torch.float16], "o")
    assert_close(ht, ht_ref, CHUNK_RATIO[torch.float16], "final state")


def test_chunk_without_final_state_and_scale() -> None:
    q, k, v, g, beta = _inputs(1, 20, 1, 1, 16, 16, torch.float32, True)
    o, ht = triton.chunk_gated_delta_rule(q, k, v, g, beta, scale=0.3, use_qk_l2norm_in_kernel=True)
    o_ref, _ = reference.recurrent_gated_delta_rule(q, k, v, g, beta, scale=0.3, use_qk_l2norm_in_kernel=True)
    assert ht is None
    assert_close(o, o_ref, CHUNK_RATIO[torch.float32], "o")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize(
    ("batch", "length", "heads", "heads_v", "dim_k", "dim_v", "l2"),
    [(3, 1, 1, 2, 16, 48, True), (1, 7, 2, 4, 32, 16, False)],
)
def test_recurrent(batch, length, heads, heads_v, dim_k, dim_v, l2, with_state, dtype) -> None:
    q, k, v, g, beta = _inputs(batch, length, heads, heads_v, dim_k, dim_v, dtype, l2)
    h0 = torch.randn(batch, heads_v, dim_k, dim_v) if with_state else None
    o, ht = triton.fused_recurrent_gated_delta_rule(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=l2
    )
    o_ref, ht_ref = _expected(q, k, v, g, beta, h0, None, l2)
    assert_close(o, o_ref.to(dtype), RECURRENT_RATIO[dtype], "o")
    assert_close(ht, ht_ref, RECURRENT_RATIO[dtype], "final state")


def test_recurrent_decode_in_place_over_packed_batch() -> None:
    """The decode path: one token per sequence for several sequences, the cache state updated in place."""
    lengths = [1, 1, 3]
    cu = torch.tensor([0, 1, 2, 5], dtype=torch.int32)
    q, k, v, g, beta = _inputs(1, sum(lengths), 2, 4, 16, 16, torch.float16, True)
    cache = torch.randn(len(lengths), 4, 16, 16)
    o_ref, ht_ref = _expected(q, k, v, g, beta, cache.clone(), cu, True)
    o, ht = triton.fused_recurrent_gated_delta_rule(
        q,
        k,
        v,
        g,
        beta,
        initial_state=cache,
        use_qk_l2norm_in_kernel=True,
        cu_seqlens=cu,
        inplace_final_state=True,
    )
    assert ht is cache
    assert_close(o, o_ref.half(), RECURRENT_RATIO[torch.float16], "o")
    assert_close(cache, ht_ref, RECURRENT_RATIO[torch.float16], "state updated in place")


def test_chunk_prefill_then_recurrent_decode_continue_one_sequence() -> None:
    q, k, v, g, beta = _inputs(1, 67, 1, 2, 16, 16, torch.float32, True)
    o_ref, ht_ref = _expected(q, k, v, g, beta, None, None, True)
    o_head, state = triton.chunk_gated_delta_rule(
        q[:, :65],
        k[:, :65],
        v[:, :65],
        g[:, :65],
        beta[:, :65],
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    outs = [o_head]
    for t in (65, 66):
        s = slice(t, t + 1)
        o_t, _ = triton.fused_recurrent_gated_delta_rule(
            q[:, s], k[:, s], v[:, s], g[:, s], beta[:, s], initial_state=state, use_qk_l2norm_in_kernel=True,
            inplace_final_state=True,
        )  # fmt: skip
        outs.append(o_t)
    assert_close(torch.cat(outs, 1), o_ref, 1e-5, "o")
    assert_close(state, ht_ref, 1e-5, "state")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_slots", [False, True])
@pytest.mark.parametrize(
    ("heads", "heads_v", "dim_k", "dim_v", "l2"), [(1, 2, 16, 48, True), (2, 4, 32, 16, False)]
)
def test_gated_decode_fuses_the_gates_and_the_slot_gather(
    heads, heads_v, dim_k, dim_v, l2, with_slots, dtype
):
    """One launch: gates from the raw projections, the step, the state written back at its cache slots."""
    batch, slots = 3, 5
    q, k, v, _, _ = _inputs(batch, 1, heads, heads_v, dim_k, dim_v, dtype, l2)
    a, b = torch.randn(batch, heads_v).to(dtype), torch.randn(batch, heads_v).to(dtype)
    a[0, 0] = 30.0  # past softplus's threshold
    A_log, dt_bias = torch.rand(heads_v) * 2.5, torch.randn(heads_v)
    slot_ids = torch.tensor([4, 0, 2]) if with_slots else None
    cache = torch.randn(slots if with_slots else batch, heads_v, dim_k, dim_v) / dim_k
    rows = cache[slot_ids] if with_slots else cache
    # Ground truth: the gates as the model computes them, then the token loop on the gathered rows.
    beta, g = deltanet_gates(a, b, A_log, dt_bias)
    o_ref, state_ref = _expected(q, k, v, g[:, None], beta[:, None], rows.clone(), None, l2)
    for impl in (triton, reference):
        state = cache.clone()
        o = impl.gated_delta_rule_decode(
            q[:, 0], k[:, 0], v[:, 0], a, b, A_log, dt_bias, state, slot_ids, use_qk_l2norm_in_kernel=l2
        )
        assert_close(o, o_ref[:, 0].to(dtype), RECURRENT_RATIO[dtype], f"o ({impl.__name__})")
        assert_close(state[slot_ids] if with_slots else state, state_ref, RECURRENT_RATIO[dtype], "state")
        if with_slots:
            assert torch.equal(state[[1, 3]], cache[[1, 3]]), "slots outside the batch stay as they were"
