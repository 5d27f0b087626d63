"""Causal depthwise conv1d + SiLU (prefill, varlen, carried state) and its decode update: Triton vs torch."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.causal_conv1d import reference, triton
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

RATIO = {torch.float32: 1e-6, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize(
    ("batch", "length", "dim", "width"), [(1, 1, 20, 4), (2, 3, 33, 4), (1, 70, 300, 4), (2, 9, 16, 2)]
)
def test_causal_conv1d(
    batch: int, length: int, dim: int, width: int, with_state: bool, dtype: torch.dtype
) -> None:
    x = torch.randn(batch, length, dim).to(dtype)
    w = torch.randn(dim, width).to(dtype)
    state = torch.randn(batch, dim, width).to(dtype) if with_state else None
    y, new_state = triton.causal_conv1d(x, w, conv_state=state)
    y_ref, new_state_ref = reference.causal_conv1d(x, w, conv_state=state)
    assert_close(y, y_ref, RATIO[dtype], "y")
    assert_close(new_state, new_state_ref, 1e-6, "new state")


@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv1d_packed_sequences(with_state: bool) -> None:
    lengths = [1, 2, 70, 5]  # shorter than the width, longer than a time block
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    dim, width = 40, 4
    x = torch.randn(1, sum(lengths), dim)
    w = torch.randn(dim, width)
    state = torch.randn(len(lengths), dim, width) if with_state else None
    y, new_state = triton.causal_conv1d(x, w, conv_state=state, cu_seqlens=cu)
    y_ref, new_state_ref = reference.causal_conv1d(x, w, conv_state=state, cu_seqlens=cu)
    assert_close(y, y_ref, 1e-6, "y")
    assert_close(new_state, new_state_ref, 1e-6, "new state")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("batch", "dim", "width"), [(1, 20, 4), (3, 600, 4), (2, 8, 3)])
def test_causal_conv1d_update(batch: int, dim: int, width: int, dtype: torch.dtype) -> None:
    x = torch.randn(batch, dim).to(dtype)
    w = torch.randn(dim, width).to(dtype)
    state = torch.randn(batch, dim, width).to(dtype)
    state_ref = state.clone()
    y = triton.causal_conv1d_update(x, w, state)
    y_ref = reference.causal_conv1d_update(x, w, state_ref)
    assert_close(y, y_ref, RATIO[dtype], "y")
    assert torch.equal(state, state_ref), "the state must be shifted and appended in place"


@pytest.mark.parametrize("impl", ["triton", "reference"])
def test_causal_conv1d_update_through_slot_ids(impl: str) -> None:
    """The per-slot cache read and written at the batch's slots only (the capture-safe decode path)."""
    update = (triton if impl == "triton" else reference).causal_conv1d_update
    dim, width, slots = 40, 4, 5
    x, w = torch.randn(3, dim), torch.randn(dim, width)
    cache = torch.randn(slots, dim, width)
    slot_ids = torch.tensor([3, 0, 4])
    rows = cache[slot_ids].clone()
    untouched = cache[[1, 2]].clone()
    y = update(x, w, cache, slot_ids)
    y_ref = reference.causal_conv1d_update(x, w, rows)
    assert_close(y, y_ref, 1e-6, "y")
    assert torch.equal(cache[slot_ids], rows), "the slots' rows are shifted and appended in place"
    assert torch.equal(cache[[1, 2]], untouched), "other slots stay as they were"


def test_prefill_then_updates_equal_one_long_prefill() -> None:
    """The decode update continues a prefill exactly: the carried state is the whole interface between them."""
    dim, width, length = 24, 4, 9
    x = torch.randn(1, length, dim)
    w = torch.randn(dim, width)
    y_full, _ = triton.causal_conv1d(x, w)
    y_head, state = triton.causal_conv1d(x[:, :5], w)
    steps = [triton.causal_conv1d_update(x[:, t], w, state) for t in range(5, length)]
    assert_close(torch.cat([y_head[0], torch.stack(steps, 1)[0]]), y_full[0], 1e-6, "y")
