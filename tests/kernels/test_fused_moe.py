"""Sorted-token grouped-GEMM MoE and the decode pair path: Triton (interpreted) vs the torch reference (the align
step has its own tests: test_moe_align.py)."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.fused_moe import reference, triton
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

# bf16 operands are upcast to fp32 for tl.dot in the interpreter, but its bf16 stores truncate (a GPU rounds to
# nearest), so the bf16 bound is loose here; the GPU check holds bf16 to the usual bound.
RATIO = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}


def _experts(
    n_experts: int, hidden: int, inter: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    w_gate_up = torch.randn(n_experts, 2 * inter, hidden) / hidden**0.5
    w_down = torch.randn(n_experts, hidden, inter) / inter**0.5
    return w_gate_up.to(dtype), w_down.to(dtype)


def _random_routing(tokens: int, n_experts: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    weights, ids = torch.rand(tokens, n_experts).topk(k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids


def _check(x, w_gate_up, w_down, weights, ids) -> None:
    """Both Triton paths (decode pairs, sorted grouped GEMM) against the reference, whatever `fused_moe` picks."""
    expected = reference.fused_moe(x, w_gate_up, w_down, weights, ids)
    for path in (triton.fused_moe_pairs, triton.fused_moe_grouped):
        out = path(x, w_gate_up.contiguous(), w_down.contiguous(), weights, ids)
        assert_close(out, expected, RATIO[x.dtype], f"moe out ({path.__name__})")


def test_fused_moe_picks_the_pair_path_for_decode_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    picked: list[str] = []
    for name in ("fused_moe_pairs", "fused_moe_grouped"):
        real = getattr(triton, name)
        monkeypatch.setattr(triton, name, lambda *a, _r=real, _n=name: picked.append(_n) or _r(*a))
    w_gate_up, w_down = _experts(8, 32, 16, torch.float32)
    for tokens in (1, triton.PAIR_PATH_MAX_PAIRS // 2, triton.PAIR_PATH_MAX_PAIRS // 2 + 1):
        x = torch.randn(tokens, 32)
        triton.fused_moe(x, w_gate_up, w_down, *_random_routing(tokens, 8, 2))
    assert picked == ["fused_moe_pairs", "fused_moe_pairs", "fused_moe_grouped"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("tokens", "n_experts", "k", "hidden", "inter"),
    [(1, 8, 2, 48, 40), (13, 6, 3, 64, 32), (40, 16, 4, 32, 24)],  # T=1 decode; odd sizes; > one M block
)
def test_fused_moe_random_routing(
    tokens: int, n_experts: int, k: int, hidden: int, inter: int, dtype
) -> None:
    x = torch.randn(tokens, hidden).to(dtype)
    _check(x, *_experts(n_experts, hidden, inter, dtype), *_random_routing(tokens, n_experts, k))


def test_fused_moe_most_experts_empty() -> None:
    tokens, n_experts, k, hidden, inter = 3, 32, 2, 32, 16
    x = torch.randn(tokens, hidden)
    weights, ids = _random_routing(tokens, n_experts, k)
    assert ids.unique().numel() <= 6 < n_experts
    _check(x, *_experts(n_experts, hidden, inter, torch.float32), weights, ids)


@pytest.mark.parametrize("k", [1, 2])
def test_fused_moe_all_tokens_on_the_same_experts(k: int) -> None:
    tokens, n_experts, hidden, inter = 37, 8, 32, 16  # 37 pairs per expert: three M blocks, the last partial
    x = torch.randn(tokens, hidden)
    ids = torch.tensor([5, 2][:k]).expand(tokens, k).contiguous()
    weights = torch.rand(tokens, k)
    _check(
        x, *_experts(n_experts, hidden, inter, torch.float32), weights / weights.sum(-1, keepdim=True), ids
    )
