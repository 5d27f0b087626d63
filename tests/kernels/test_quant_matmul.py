"""`x @ W.T` with W in GGUF blocks: the chunked torch reference against gguf-dequantized weights, the tl.dot GEMM
(prefill; interpreted) against the reference, and the dispatch between it and the decode GEMV (whose own tests
are in test_packed_gemv.py)."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.quant_matmul import reference, triton
from engine.quant.formats import QUANTIZED_TYPES, GGMLType
from engine.testing.quant_recipe import random_blocks
from tests.kernels.numerics import assert_close
from tests.kernels.test_dequantize import gguf_dequantize

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

QUANTIZED = sorted(QUANTIZED_TYPES)
# As test_fused_moe: the interpreter's bf16 stores truncate (a GPU rounds to nearest), so bf16 is loose here.
RATIO = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}
ROWS = 72  # not a multiple of any block of rows the kernels use


def _weight(kind: GGMLType, cols: int, seed: int = 0) -> torch.Tensor:
    return random_blocks(kind, ROWS, cols, magnitude=cols**-0.5, seed=seed)


@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
def test_reference_matches_gguf_weights(kind: GGMLType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row chunks (five of 16 rows, the last partial) give the product with the whole gguf-dequantized weight."""
    blocks = _weight(kind, 512)
    x = torch.randn(3, 512)
    expected = x @ gguf_dequantize(blocks, kind).T
    monkeypatch.setattr(reference, "CHUNK_WEIGHTS", 16 * 512)
    assert_close(reference.quant_matmul(x, blocks, kind, 512), expected, RATIO[torch.float32], "chunked")
    monkeypatch.setattr(reference, "CHUNK_WEIGHTS", 1 << 20)
    assert_close(reference.quant_matmul(x, blocks, kind, 512), expected, RATIO[torch.float32], "one chunk")


@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
@pytest.mark.parametrize("tokens", [17, 40])
def test_gemm_matches_reference(kind: GGMLType, tokens: int) -> None:
    blocks = _weight(kind, 256, seed=tokens)
    x = torch.randn(tokens, 256)
    expected = reference.quant_matmul(x, blocks, kind, 256)
    assert_close(triton.quant_gemm(x, blocks, kind, 256), expected, RATIO[torch.float32], f"{kind.name} gemm")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", [GGMLType.Q4_K, GGMLType.MXFP4], ids=lambda k: k.name)
def test_gemm_half_precision(kind: GGMLType, dtype: torch.dtype) -> None:
    blocks = _weight(kind, 256, seed=5)
    x = torch.randn(24, 256).to(dtype)
    expected = reference.quant_matmul(x, blocks, kind, 256)
    assert_close(triton.quant_gemm(x, blocks, kind, 256), expected, RATIO[dtype], f"{kind.name} gemm {dtype}")


@pytest.mark.parametrize(
    ("kind", "weight_dtype", "x_dtype"),
    [
        (GGMLType.F16, torch.float16, torch.float32),
        (GGMLType.BF16, torch.bfloat16, torch.float32),
        (GGMLType.F32, torch.float32, torch.float16),
    ],
    ids=["F16", "BF16", "F32"],
)
@pytest.mark.parametrize("tokens", [2, 17])
def test_float_weights(kind: GGMLType, weight_dtype: torch.dtype, x_dtype: torch.dtype, tokens: int) -> None:
    """Float weights of another dtype than x go through the same kernels (their "blocks" are 32 plain values)."""
    weight = (torch.randn(ROWS, 64) / 8).to(weight_dtype)
    x = torch.randn(tokens, 64).to(x_dtype)
    expected = x @ weight.to(x_dtype).T
    for stored in (weight.view(torch.uint8), weight):  # its bytes, or the float tensor itself
        assert_close(
            triton.quant_matmul(x, stored, kind, 64), expected, RATIO[x_dtype], f"{kind.name} {x_dtype}"
        )
        assert_close(reference.quant_matmul(x, stored, kind, 64), expected, RATIO[x_dtype], "reference")
    same_dtype = weight.to(x_dtype)  # no kernel: the reference's F.linear on the values
    assert_close(triton.quant_matmul(x, same_dtype, kind, 64), expected, RATIO[x_dtype], "in place")


def test_quant_matmul_picks_gemv_for_decode_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    picked: list[str] = []
    for name in ("quant_gemv", "quant_gemm"):
        real = getattr(triton, name)
        monkeypatch.setattr(triton, name, lambda *a, _r=real, _n=name: picked.append(_n) or _r(*a))
    blocks = _weight(GGMLType.Q8_0, 64)
    for tokens in (1, triton.GEMV_MAX_TOKENS, triton.GEMV_MAX_TOKENS + 1):
        out = triton.quant_matmul(torch.randn(tokens, 64), blocks, GGMLType.Q8_0, 64)
        assert out.shape == (tokens, ROWS)
    assert picked == ["quant_gemv", "quant_gemv", "quant_gemm"]
