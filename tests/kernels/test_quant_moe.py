"""Routed experts with GGUF block-quantized weights: the torch reference against fused_moe's dense reference over
gguf-dequantized experts, both Triton paths (decode pairs, sorted grouped GEMM; interpreted) against the reference,
and the reference reading only the routed experts."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.fused_moe.reference import fused_moe
from engine.kernels.quant_moe import reference, triton
from engine.quant.formats import QUANTIZED_TYPES, GGMLType
from engine.testing.quant_recipe import random_blocks
from tests.kernels.numerics import assert_close
from tests.kernels.test_dequantize import gguf_dequantize

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

# As test_fused_moe: the interpreter's bf16 stores truncate (a GPU rounds to nearest), so bf16 is loose here.
RATIO = {torch.float32: 1e-5, torch.bfloat16: 4e-2}
HIDDEN, INTER, EXPERTS, TOP_K = 256, 256, 4, 2

Experts = tuple[torch.Tensor, GGMLType, torch.Tensor, GGMLType, torch.Tensor, GGMLType]


def _experts(gate_kind: GGMLType, up_kind: GGMLType, down_kind: GGMLType, seed: int = 0) -> Experts:
    gate = random_blocks(gate_kind, (EXPERTS, INTER), HIDDEN, magnitude=HIDDEN**-0.5, seed=seed)
    up = random_blocks(up_kind, (EXPERTS, INTER), HIDDEN, magnitude=HIDDEN**-0.5, seed=seed + 1)
    down = random_blocks(down_kind, (EXPERTS, HIDDEN), INTER, magnitude=INTER**-0.5, seed=seed + 2)
    return gate, gate_kind, up, up_kind, down, down_kind


def _routing(tokens: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    weights, ids = torch.rand(tokens, EXPERTS, generator=gen).topk(TOP_K, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids


def _dense(x: torch.Tensor, experts: Experts, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """fused_moe's reference over the whole gguf-dequantized experts."""
    gate, gate_kind, up, up_kind, down, down_kind = experts
    w_gate_up = torch.cat((gguf_dequantize(gate, gate_kind), gguf_dequantize(up, up_kind)), dim=1)
    return fused_moe(x, w_gate_up.to(x.dtype), gguf_dequantize(down, down_kind).to(x.dtype), weights, ids)


def _check(x: torch.Tensor, experts: Experts, tokens_seed: int = 0) -> None:
    """Reference vs dense; then the pair path for a decode-sized batch (up to 4 tokens), else the grouped path
    (whatever the dispatcher's cut-over, which the interpreter's speed keeps these tests from sweeping)."""
    weights, ids = _routing(x.shape[0], tokens_seed)
    expected = reference.quant_moe(x, *experts, weights, ids)
    assert_close(expected, _dense(x, experts, weights, ids), RATIO[torch.float32], "reference vs dense")
    path = triton.quant_moe_pairs if x.shape[0] <= 4 else triton.quant_moe_grouped
    assert_close(path(x, *experts, weights, ids), expected, RATIO[x.dtype], f"{path.__name__} {x.dtype}")


@pytest.mark.parametrize("kind", sorted(QUANTIZED_TYPES), ids=lambda k: k.name)
@pytest.mark.parametrize("tokens", [1, 20])  # decode (pair path), prefill (grouped path)
def test_quant_moe_each_type(kind: GGMLType, tokens: int) -> None:
    _check(torch.randn(tokens, HIDDEN), _experts(kind, kind, kind, seed=int(kind)), tokens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [3, 24])
def test_quant_moe_mixed_types(tokens: int, dtype: torch.dtype) -> None:
    """Gate, up and down of three different types (as a Q4_K_M file mixes them)."""
    _check(
        torch.randn(tokens, HIDDEN).to(dtype), _experts(GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K), tokens
    )


def test_quant_moe_grouped_path_at_decode_size() -> None:
    """The grouped kernels at a decode size too (the dispatcher sends these to the pair path)."""
    experts = _experts(GGMLType.IQ4_XS, GGMLType.MXFP4, GGMLType.Q8_0)
    x = torch.randn(2, HIDDEN)
    weights, ids = _routing(2)
    expected = reference.quant_moe(x, *experts, weights, ids)
    assert_close(
        triton.quant_moe_grouped(x, *experts, weights, ids), expected, RATIO[torch.float32], "grouped"
    )


@pytest.mark.parametrize("tokens", [2, 20])
def test_quant_moe_float_experts(tokens: int) -> None:
    """BF16 experts given as bf16 tensors (how the loader keeps float weights) with an fp32 x, beside Q8_0 down."""
    gate = (torch.randn(EXPERTS, INTER, HIDDEN) / HIDDEN**0.5).bfloat16()
    up = (torch.randn(EXPERTS, INTER, HIDDEN) / HIDDEN**0.5).bfloat16()
    down = random_blocks(GGMLType.Q8_0, (EXPERTS, HIDDEN), INTER, magnitude=INTER**-0.5)
    experts = (gate, GGMLType.BF16, up, GGMLType.BF16, down, GGMLType.Q8_0)
    x = torch.randn(tokens, HIDDEN)
    weights, ids = _routing(tokens)
    expected = reference.quant_moe(x, *experts, weights, ids)
    w_gate_up = torch.cat((gate, up), dim=1).float()
    dense = fused_moe(x, w_gate_up, gguf_dequantize(down, GGMLType.Q8_0), weights, ids)
    assert_close(expected, dense, RATIO[torch.float32], "reference vs dense")
    path = triton.quant_moe_pairs if tokens <= 4 else triton.quant_moe_grouped
    bytes_of = (
        gate.view(torch.uint8),
        GGMLType.BF16,
        up.view(torch.uint8),
        GGMLType.BF16,
        down,
        GGMLType.Q8_0,
    )
    assert_close(path(x, *bytes_of, weights, ids), expected, RATIO[torch.float32], path.__name__)
    if tokens <= 4:  # float tensors through the dispatcher (which takes their bytes)
        assert_close(triton.quant_moe(x, *experts, weights, ids), expected, RATIO[torch.float32], "dispatch")


@pytest.mark.parametrize("tokens", [1, 5])
def test_only_routed_experts_are_read(tokens: int) -> None:
    """Experts 0 and 3 are never routed to; their blocks are all 0xFF (NaN scales). Outputs are unchanged."""
    experts = _experts(GGMLType.Q4_K, GGMLType.Q8_0, GGMLType.Q6_K)
    x = torch.randn(tokens, HIDDEN)
    weights, ids = _routing(tokens)
    ids = torch.where(ids == 0, 1, torch.where(ids == 3, 2, ids))
    ids[:, 1] = 3 - ids[:, 0]  # experts 1 and 2, distinct per token
    clean = reference.quant_moe(x, *experts, weights, ids)
    poisoned = list(experts)
    for i in (0, 2, 4):
        poisoned[i] = experts[i].clone()
        poisoned[i][[0, 3]] = 255
    assert torch.isfinite(clean).all()
    assert torch.equal(reference.quant_moe(x, *poisoned, weights, ids), clean)
    assert_close(triton.quant_moe(x, *poisoned, weights, ids), clean, RATIO[torch.float32], "triton")


def test_quant_moe_picks_the_pair_path_for_decode_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    picked: list[str] = []
    for name in ("quant_moe_pairs", "quant_moe_grouped"):
        monkeypatch.setattr(triton, name, lambda *a, _n=name: picked.append(_n) or torch.zeros(1))
    experts = _experts(GGMLType.Q8_0, GGMLType.Q8_0, GGMLType.Q8_0)
    for tokens in (1, triton.PAIR_PATH_MAX_PAIRS // TOP_K, triton.PAIR_PATH_MAX_PAIRS // TOP_K + 1):
        triton.quant_moe(torch.randn(tokens, HIDDEN), *experts, *_routing(tokens))
    assert picked == ["quant_moe_pairs", "quant_moe_pairs", "quant_moe_grouped"]
