"""The compiled CPU kernel for GGUF weights (`engine/kernels/quant_matmul/cpu.py`, `cpu_gemv.c`) against the torch
reference, which is itself bit-exact against llama.cpp's numpy dequantizer (tests/kernels/test_dequantize.py)."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.dequantize import reference as dequant_reference
from engine.kernels.quant_matmul import cpu, quant_matmul, reference
from engine.quant.formats import QUANTIZED_TYPES, GGMLType
from engine.testing.quant_recipe import random_blocks

QUANTIZED = sorted(QUANTIZED_TYPES)


@pytest.fixture(autouse=True)
def built() -> None:
    if cpu.library() is None:
        pytest.skip("no C compiler here: the CPU kernel falls back to the reference (tested below)")


@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
def test_decoding_is_bit_exact(kind: GGMLType) -> None:
    blocks = random_blocks(kind, (3, 7), 512, magnitude=0.3, seed=5)
    assert torch.equal(
        cpu.dequantize(blocks, int(kind), 512), dequant_reference.dequantize(blocks, int(kind), 512)
    )


@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
@pytest.mark.parametrize("tokens", [1, 3, 16])
def test_gemv_matches_the_reference(kind: GGMLType, tokens: int) -> None:
    cols = 512
    blocks = random_blocks(
        kind, 301, cols, magnitude=cols**-0.5, seed=tokens
    )  # 301 rows: uneven thread split
    x = torch.randn(tokens, cols)
    expected = reference.quant_matmul(x, blocks, int(kind), cols)
    actual = cpu.quant_matmul(x, blocks, int(kind), cols)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    # Rows that are not adjacent in memory (a stride of two rows) and a transposed (non-contiguous) input.
    strided = blocks[::2]
    xt = torch.randn(cols, tokens).t()
    torch.testing.assert_close(
        cpu.quant_matmul(xt, strided, int(kind), cols),
        reference.quant_matmul(xt, strided, int(kind), cols),
        rtol=1e-5,
        atol=1e-5,
    )


def test_dispatch_takes_the_kernel_for_decode_and_the_reference_otherwise(monkeypatch) -> None:
    kind, cols = GGMLType.Q4_K, 256
    blocks = random_blocks(kind, 40, cols, seed=1)
    calls = []
    monkeypatch.setattr(cpu.library(), "aw_quant_gemv", _recording(cpu.library().aw_quant_gemv, calls))
    quant_matmul(torch.randn(2, cols), blocks, int(kind), cols)
    assert len(calls) == 1
    many = torch.randn(cpu.MAX_TOKENS + 1, cols)
    assert torch.equal(
        quant_matmul(many, blocks, int(kind), cols), reference.quant_matmul(many, blocks, int(kind), cols)
    )
    monkeypatch.setenv("AW_CPU_GEMV", "0")
    x = torch.randn(2, cols)
    assert torch.equal(
        quant_matmul(x, blocks, int(kind), cols), reference.quant_matmul(x, blocks, int(kind), cols)
    )
    assert len(calls) == 1


def _recording(fn, calls):
    def record(*args):
        calls.append(args)
        return fn(*args)

    return record


def test_a_failed_build_warns_once_and_falls_back(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(cpu, "_tried", False)
    monkeypatch.setattr(cpu, "_library", None)
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setenv("AW_CACHE_DIR", str(tmp_path))
    with pytest.warns(RuntimeWarning, match="could not be built"):
        assert cpu.library() is None
    blocks = random_blocks(GGMLType.Q6_K, 8, 256)
    x = torch.randn(1, 256)
    assert torch.equal(
        cpu.quant_matmul(x, blocks, int(GGMLType.Q6_K), 256), reference.quant_matmul(x, blocks, 14, 256)
    )
