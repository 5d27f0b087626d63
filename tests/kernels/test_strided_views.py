"""The decode kernels read the layers' split views through their strides, and write where the next op reads.

Each decode layer splits one fused projection's output ([qkv | z | b | a], [router | shared gate]) along the last
dim: rows of those views are not contiguous. The kernels take the strides instead of a `.contiguous()` copy (one
launch fewer per view per layer, ~300 per step at batch 32: bench/results/decode_launches_2026-12-02.md). Each
test builds the views as the layer does, at tiny shapes, and checks (1) the kernel (interpreted) against the
plain-torch reference on the same views and (2) that the launch received the caller's storage, not a copy.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

from engine.kernels.causal_conv1d import reference as conv_ref
from engine.kernels.causal_conv1d import triton as conv_tri
from engine.kernels.gated_delta_rule import reference as gdn_ref
from engine.kernels.gated_delta_rule import triton as gdn_tri
from engine.kernels.gated_rms_norm import reference as gated_ref
from engine.kernels.gated_rms_norm import triton as gated_tri
from engine.kernels.quant_matmul import reference as qmm_ref
from engine.kernels.quant_matmul import triton as qmm_tri
from engine.kernels.router_topk import reference as router_ref
from engine.kernels.router_topk import triton as router_tri
from engine.quant.formats import GGMLType
from engine.quant.weight import QuantizedWeight, QuantTensor
from engine.testing.quant_recipe import random_blocks
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

DTYPES = [torch.float32, torch.float16]
RATIO = {torch.float32: 1e-5, torch.float16: 2e-3}


class LaunchSpy:
    """Stands in for a kernel object: `spy[grid](*args)` records the arguments, then launches the real kernel."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.launches: list[tuple[Any, ...]] = []

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            self.launches.append(args)
            return self.kernel[grid](*args, **kwargs)

        return launch

    def received(self, view: torch.Tensor) -> bool:
        """Some launch got `view` itself: same storage, offset and strides (not a copy of it)."""
        return any(
            isinstance(arg, torch.Tensor)
            and arg.data_ptr() == view.data_ptr()
            and arg.stride()[-view.dim() :] == view.stride()
            for args in self.launches
            for arg in args
        )


def spy_on(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> LaunchSpy:
    spy = LaunchSpy(getattr(module, name))
    monkeypatch.setattr(module, name, spy)
    return spy


def _fused(tokens: int, widths: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
    """Views of one [tokens, sum(widths) + 3] projection output, split as a layer splits it (3 spare columns,
    so no view's row stride is its width)."""
    fused = torch.randn(tokens, sum(widths) + 3).to(dtype)
    return list(fused[:, : sum(widths)].split(widths, dim=-1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_shared", [False, True])
def test_router_topk_reads_the_split_logits(with_shared: bool, dtype: torch.dtype, monkeypatch) -> None:
    tokens, experts, k = 5, 12, 3
    logits, shared_gate = _fused(tokens, [experts, 1], dtype)
    shared = shared_gate if with_shared else None
    spy = spy_on(monkeypatch, router_tri, "_router_topk_kernel")
    weights, ids = router_tri.router_topk(logits, k, shared)
    weights_ref, ids_ref = router_ref.router_topk(logits, k, shared)
    assert torch.equal(ids, ids_ref)
    assert_close(weights, weights_ref, RATIO[dtype], "weights")
    assert spy.received(logits) and (not with_shared or spy.received(shared_gate)), "the views were copied"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_slots", [False, True])
def test_conv_update_reads_the_split_input(with_slots: bool, dtype: torch.dtype, monkeypatch) -> None:
    batch, dim, width = 3, 40, 4
    x, _ = _fused(batch, [dim, 7], dtype)
    weight = torch.randn(dim, width).to(dtype)
    slot_ids = torch.tensor([2, 0, 4]) if with_slots else None
    cache = torch.randn(5 if with_slots else batch, dim, width).to(dtype)
    spy = spy_on(monkeypatch, conv_tri, "_causal_conv1d_update_kernel")
    state = cache.clone()
    y = conv_tri.causal_conv1d_update(x, weight, state, slot_ids)
    state_ref = cache.clone()
    y_ref = conv_ref.causal_conv1d_update(x, weight, state_ref, slot_ids)
    assert_close(y, y_ref, RATIO[dtype], "y")
    assert torch.equal(state, state_ref), "the state shift is exact"
    assert spy.received(x), "the view was copied"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_slots", [False, True])
def test_gated_decode_reads_the_split_heads(with_slots: bool, dtype: torch.dtype, monkeypatch) -> None:
    """q, k, v as views of the conv output [B, 2*H*K + HV*V], a and b of the projection: as `deltanet_decode`."""
    batch, heads, heads_v, dim_k, dim_v = 3, 2, 4, 16, 8
    mixed, a, b = _fused(batch, [2 * heads * dim_k + heads_v * dim_v, heads_v, heads_v], dtype)
    q, k, v = mixed.split([heads * dim_k, heads * dim_k, heads_v * dim_v], dim=-1)
    q, k = q.reshape(batch, heads, dim_k), k.reshape(batch, heads, dim_k)
    v = v.reshape(batch, heads_v, dim_v)
    assert not (q.is_contiguous() or v.is_contiguous() or a.is_contiguous()), "the test needs strided views"
    A_log, dt_bias = torch.rand(heads_v) * 2.5, torch.randn(heads_v)
    slot_ids = torch.tensor([4, 0, 2]) if with_slots else None
    cache = torch.randn(5 if with_slots else batch, heads_v, dim_k, dim_v) / dim_k
    spy = spy_on(monkeypatch, gdn_tri, "_gated_decode_kernel")
    state = cache.clone()
    o = gdn_tri.gated_delta_rule_decode(q, k, v, a, b, A_log, dt_bias, state, slot_ids)
    state_ref = cache.clone()
    o_ref = gdn_ref.gated_delta_rule_decode(q, k, v, a, b, A_log, dt_bias, state_ref, slot_ids)
    assert_close(o, o_ref, RATIO[dtype], "o")
    assert_close(state, state_ref, RATIO[dtype], "state")
    assert all(spy.received(t) for t in (q, k, v, a, b)), "a view was copied"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("permuted", [False, True])
def test_gated_norm_reads_the_split_gate(permuted: bool, dtype: torch.dtype, monkeypatch) -> None:
    """gate: the z view [T, HV, V] of the fused projection; `out_rows` moves each head's output row."""
    tokens, heads_v, dim_v = 3, 4, 16
    x = torch.randn(tokens, heads_v, dim_v).to(dtype)
    z, _ = _fused(tokens, [heads_v * dim_v, 5], dtype)
    gate = z.reshape(tokens, heads_v, dim_v)
    weight = (1 + 0.1 * torch.randn(dim_v)).to(dtype)
    out_rows = torch.tensor([2, 0, 3, 1]) if permuted else None
    spy = spy_on(monkeypatch, gated_tri, "_gated_rms_norm_kernel")
    y = gated_tri.gated_rms_norm(x, gate, weight, 1e-6, out_rows)
    y_ref = gated_ref.gated_rms_norm(x, gate, weight, 1e-6, out_rows)
    assert_close(y, y_ref, RATIO[dtype], "y")
    assert spy.received(gate), "the gate view was copied"
    if permuted:  # the reference's permutation itself: head i lands at row out_rows[i]
        plain = gated_ref.gated_rms_norm(x, gate, weight, 1e-6)
        assert torch.equal(y_ref[:, out_rows], plain)


def test_input_groups_feed_the_stored_order_weight() -> None:
    """A weight whose input columns are stored by head groups in another order (the GGUF DeltaNet out
    projection): the norm writing row i at `out_rows[i]` times the stored-order weight is the permuted product."""
    heads, dim, rows = 4, 32, 8
    cols = heads * dim
    order = torch.tensor([1, 3, 0, 2])  # stored group g holds logical group order[g]
    in_perm = (order[:, None] * dim + torch.arange(dim)).reshape(-1)
    blocks = random_blocks(GGMLType.Q8_0, rows, cols, magnitude=cols**-0.5)
    weight = QuantizedWeight([QuantTensor(blocks, GGMLType.Q8_0, cols)], torch.float32, in_perm)
    out_rows, stored = weight.input_groups(dim)
    assert stored.in_perm is None and torch.equal(order[out_rows], torch.arange(heads))
    x = torch.randn(3, heads, dim)
    moved = torch.empty_like(x).index_copy_(1, out_rows, x).reshape(3, cols)
    assert torch.equal(stored.matmul(moved), weight.matmul(x.reshape(3, cols)))
    assert weight.input_groups(dim // 2 + 1) is None, "groups that do not divide the columns"
    split = QuantizedWeight(weight.parts, torch.float32, in_perm.reshape(-1, 2).flip(1).reshape(-1))
    assert split.input_groups(dim) is None, "a permutation inside a group cannot move to the producer"


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_parts_write_one_output(dtype: torch.dtype, monkeypatch) -> None:
    """Above the GEMV band a two-type fused weight runs one GEMM per part into its columns of one output."""
    tokens, cols = 20, 256
    parts = [
        (random_blocks(GGMLType.Q5_K, 24, cols, magnitude=cols**-0.5, seed=1), int(GGMLType.Q5_K)),
        (random_blocks(GGMLType.Q4_K, 40, cols, magnitude=cols**-0.5, seed=2), int(GGMLType.Q4_K)),
    ]
    x = torch.randn(tokens, cols).to(dtype)
    spy = spy_on(monkeypatch, qmm_tri, "_gemm_kernel")
    cat_calls = []
    real_cat = torch.cat
    monkeypatch.setattr(torch, "cat", lambda *a, **k: cat_calls.append(1) or real_cat(*a, **k))
    out = qmm_tri.quant_matmul_parts(x, parts, cols)
    monkeypatch.setattr(torch, "cat", real_cat)
    expected = qmm_ref.quant_matmul_parts(x, parts, cols)
    assert_close(out, expected, {torch.float32: 1e-5, torch.float16: 5e-3}[dtype], "parts")
    assert len(spy.launches) == 2 and not cat_calls, "one GEMM per part, no concatenation"


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_attention_applies_the_gate_view(dtype: torch.dtype, monkeypatch) -> None:
    """The gated attention's output gate (the gate half of each head's [query | gate] projection) is applied in
    the merge pass, read in place: no sigmoid or multiply launch of its own."""
    from engine.kernels.decode_attention import reference as attn_ref
    from engine.kernels.decode_attention import triton as attn_tri

    batch, heads, kv_heads, dim, length = 3, 4, 2, 16, 20
    keys = torch.randn(4, kv_heads, length, dim).to(dtype)
    values = torch.randn(4, kv_heads, length, dim).to(dtype)
    q_gate = torch.randn(batch, heads, 2 * dim).to(dtype)
    q, gate = q_gate[..., :dim], q_gate[..., dim:]
    slots, positions = torch.tensor([2, 0, 3]), torch.tensor([19, 4, 9])
    spy = spy_on(monkeypatch, attn_tri, "_merge_kernel")
    got = attn_tri.decode_attention(q, keys, values, slots, positions, gate=gate)
    want = attn_ref.decode_attention(q, keys, values, slots, positions, gate=gate)
    plain = attn_ref.decode_attention(q, keys, values, slots, positions)
    assert torch.equal(want, plain * torch.sigmoid(gate)), "the reference gates as the layer did"
    assert_close(got, want, RATIO[dtype], "gated o")
    assert spy.received(gate), "the gate view was copied"
