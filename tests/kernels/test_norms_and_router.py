"""RMSNorm (+ residual), gated RMSNorm and the router's softmax-top-k: Triton (interpreted) vs torch reference."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.gated_rms_norm import reference as gated_ref
from engine.kernels.gated_rms_norm import triton as gated_tri
from engine.kernels.rms_norm import reference as rms_ref
from engine.kernels.rms_norm import triton as rms_tri
from engine.kernels.router_topk import reference as router_ref
from engine.kernels.router_topk import triton as router_tri
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

# fp16 stores round to nearest in the interpreter as on a GPU; bf16 stores truncate there (a GPU rounds to
# nearest), so bf16 results may differ by one bf16 ulp from torch and get a looser bound.
RATIO = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 48), (3, 5, 37), (7, 300)])
def test_rms_norm(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    x = torch.randn(shape).to(dtype)
    w = (0.1 * torch.randn(shape[-1])).to(dtype)
    assert_close(rms_tri.rms_norm(x, w, 1e-6), rms_ref.rms_norm(x, w, 1e-6), RATIO[dtype], "y")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 48), (4, 37)])
def test_rms_norm_with_residual(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    x, residual = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    w = (0.1 * torch.randn(shape[-1])).to(dtype)
    y, h = rms_tri.rms_norm(x, w, 1e-6, residual=residual)
    y_ref, h_ref = rms_ref.rms_norm(x, w, 1e-6, residual=residual)
    assert_close(h, h_ref, RATIO[dtype], "x + residual")
    assert_close(y, y_ref, RATIO[dtype], "y")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1, 2, 32), (2, 3, 4, 40)])
def test_gated_rms_norm(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    x, gate = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    w = (1 + 0.1 * torch.randn(shape[-1])).to(dtype)
    y = gated_tri.gated_rms_norm(x, gate, w, 1e-6)
    assert_close(y, gated_ref.gated_rms_norm(x, gate, w, 1e-6), RATIO[dtype] * 2, "y")


def test_gated_rms_norm_fp32_weight_with_half_input() -> None:
    x, gate = torch.randn(3, 16).half(), torch.randn(3, 16).half()
    w = 1 + 0.1 * torch.randn(16)
    y = gated_tri.gated_rms_norm(x, gate, w, 1e-6)
    assert_close(y, gated_ref.gated_rms_norm(x, gate, w, 1e-6), 2e-3, "y")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("tokens", "experts", "k"), [(1, 8, 2), (5, 10, 3), (9, 64, 8), (3, 7, 7)])
def test_router_topk(tokens: int, experts: int, k: int, dtype: torch.dtype) -> None:
    # Distinct logits in every row, exactly representable in fp16 too, so the top-k order is unambiguous.
    ranks = torch.stack([torch.randperm(experts) for _ in range(tokens)]).float()
    logits = ((ranks - experts / 2) * 0.125).to(dtype)
    weights, ids = router_tri.router_topk(logits, k)
    weights_ref, ids_ref = router_ref.router_topk(logits, k)
    assert ids.dtype == torch.int64 and weights.dtype == torch.float32
    assert torch.equal(ids, ids_ref)
    assert_close(weights, weights_ref, 1e-6, "weights")
    torch.testing.assert_close(weights.sum(-1), torch.ones(tokens))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_router_topk_appends_the_shared_expert_pair(dtype: torch.dtype) -> None:
    """With the shared expert's gate logit: pair k is expert E, weighted sigmoid(logit), outside the renormalisation."""
    tokens, experts, k = 4, 16, 3
    ranks = torch.stack([torch.randperm(experts) for _ in range(tokens)]).float()
    logits = ((ranks - experts / 2) * 0.125).to(dtype)
    shared_gate = torch.randn(tokens, 1).to(dtype)
    weights, ids = router_tri.router_topk(logits, k, shared_gate)
    weights_ref, ids_ref = router_ref.router_topk(logits, k, shared_gate)
    assert weights.shape == ids.shape == (tokens, k + 1)
    assert torch.equal(ids, ids_ref) and (ids[:, k] == experts).all()
    assert_close(weights, weights_ref, 1e-6, "weights")
    torch.testing.assert_close(weights[:, k], torch.sigmoid(shared_gate.float())[:, 0])
    torch.testing.assert_close(weights[:, :k].sum(-1), torch.ones(tokens))
    assert torch.equal(router_tri.router_topk(logits, k)[1], ids[:, :k])
