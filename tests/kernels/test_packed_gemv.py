"""The packed decode GEMV (engine/kernels/quant_matmul/gemv.py, packed.py; interpreted) against the chunked torch
reference (itself checked against gguf's dequantizer in test_quant_matmul.py): every GGUF type and float kind, each
token layout of the band (1-2, 3-4, 5-16 tokens), split K, rows ending inside a step, unaligned views."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.quant_matmul import gemv, reference
from engine.kernels.quant_matmul import triton as quant_triton
from engine.quant.formats import QUANTIZED_TYPES, GGMLType
from engine.testing.quant_recipe import random_blocks
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

QUANTIZED = sorted(QUANTIZED_TYPES)
# fp32: the reference's own weights, summed in another order; bf16/fp16: the reference rounds the weights to x's
# dtype (the kernel keeps them fp32) and the interpreter's half stores truncate.
RATIO = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}
ROWS = 40  # not a multiple of any layout's rows per program


def _blocks(kind: GGMLType, cols: int, rows: int = ROWS, seed: int = 0) -> torch.Tensor:
    return random_blocks(kind, rows, cols, magnitude=cols**-0.5, seed=seed)


@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
@pytest.mark.parametrize("tokens", [1, 3, 9])  # the three layouts: 32, 16 and 8 values per lane
def test_each_type_matches_reference(kind: GGMLType, tokens: int) -> None:
    blocks = _blocks(kind, 512, seed=tokens)
    x = torch.randn(tokens, 512)
    expected = reference.quant_matmul(x, blocks, kind, 512)
    assert_close(
        gemv.quant_gemv(x, blocks, kind, 512), expected, RATIO[torch.float32], f"{kind.name} T={tokens}"
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.IQ4_XS], ids=lambda k: k.name)
def test_half_precision_x(kind: GGMLType, dtype: torch.dtype) -> None:
    blocks = _blocks(kind, 256, seed=3)
    x = torch.randn(2, 256).to(dtype)
    expected = reference.quant_matmul(x, blocks, kind, 256)
    assert_close(gemv.quant_gemv(x, blocks, kind, 256), expected, RATIO[dtype], f"{kind.name} {dtype}")


def test_sixteen_tokens_and_split_k() -> None:
    """The top of the band, and a weight of few rows and many columns, whose rows split K over 4+ lane groups."""
    layout = gemv.decode_layout(1, 24, 2048, GGMLType.Q5_K)
    assert layout.split >= 4 and gemv.decode_layout(1, 1 << 20, 2048, GGMLType.Q5_K).split == 1
    blocks = _blocks(GGMLType.Q5_K, 2048, rows=24, seed=5)
    for tokens in (1, 16):
        x = torch.randn(tokens, 2048)
        expected = reference.quant_matmul(x, blocks, GGMLType.Q5_K, 2048)
        out = gemv.quant_gemv(x, blocks, GGMLType.Q5_K, 2048)
        assert_close(out, expected, RATIO[torch.float32], f"split K T={tokens}")


@pytest.mark.parametrize(("kind", "cols"), [(GGMLType.Q8_0, 96), (GGMLType.MXFP4, 160), (GGMLType.Q8_0, 288)])
def test_rows_ending_inside_a_step(kind: GGMLType, cols: int) -> None:
    """32-weight blocks: a row need not fill the last 256-column step (its lanes past the end read x = 0)."""
    blocks = _blocks(kind, cols, seed=cols)
    x = torch.randn(5, cols)
    expected = reference.quant_matmul(x, blocks, kind, cols)
    assert_close(
        gemv.quant_gemv(x, blocks, kind, cols), expected, RATIO[torch.float32], f"{kind.name} {cols}"
    )


@pytest.mark.parametrize("kind", [GGMLType.MXFP4, GGMLType.Q4_K], ids=lambda k: k.name)
def test_unaligned_view(kind: GGMLType) -> None:
    """Blocks starting at an odd address (a view the loader never makes) are read right (through a copy)."""
    blocks = _blocks(kind, 256, rows=8)
    storage = torch.empty(blocks.numel() + 1, dtype=torch.uint8)
    odd = storage[1:].view(blocks.shape)
    odd.copy_(blocks)
    assert odd.data_ptr() % 4
    x = torch.randn(1, 256)
    expected = reference.quant_matmul(x, blocks, kind, 256)
    assert_close(gemv.quant_gemv(x, odd, kind, 256), expected, RATIO[torch.float32], kind.name)


def test_one_launch_and_no_partial_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode matmul is one kernel writing [T, N] straight away: no split-K buffer, no torch op after it."""
    allocated: list[tuple[int, ...]] = []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: allocated.append(tuple(a)) or real_empty(*a, **k))
    launched: list[str] = []
    real_kernel = gemv._gemv_kernel
    monkeypatch.setattr(gemv, "_gemv_kernel", _Recorder(real_kernel, launched))
    blocks = _blocks(GGMLType.Q4_K, 4096, rows=16)  # few rows, long K: the old kernel split K here
    x = torch.randn(2, 4096)
    out = quant_triton.quant_matmul(x, blocks, GGMLType.Q4_K, 4096)
    assert launched == ["_gemv_kernel"] and allocated == [(2, 16)]
    assert_close(out, reference.quant_matmul(x, blocks, GGMLType.Q4_K, 4096), RATIO[torch.float32], "value")


class _Recorder:
    """Stands in for a jit function: records `kernel[grid]` launches, then runs the real one."""

    def __init__(self, kernel, launched: list[str]) -> None:
        self.kernel, self.launched = kernel, launched

    def __getitem__(self, grid):
        self.launched.append(self.kernel.fn.__name__)
        return self.kernel[grid]


@pytest.mark.parametrize(
    ("first", "second"), [(GGMLType.Q5_K, GGMLType.Q4_K), (GGMLType.Q4_K, GGMLType.Q6_K)], ids=str
)
@pytest.mark.parametrize("tokens", [1, 9])
def test_two_part_weight_in_one_launch(
    first: GGMLType, second: GGMLType, tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fused projection stored as two types (the DeltaNet input projection is Q5_K + Q4_K in Q4_K_M): one
    launch writes both parts' rows side by side, as the reference's per-part products concatenated."""
    parts = [
        (_blocks(first, 512, rows=40, seed=1), int(first)),
        (_blocks(second, 512, rows=24, seed=2), int(second)),
    ]
    x = torch.randn(tokens, 512)
    launched: list[str] = []
    monkeypatch.setattr(gemv, "_gemv_kernel", _Recorder(gemv._gemv_kernel, launched))
    out = quant_triton.quant_matmul_parts(x, parts, 512)
    assert launched == ["_gemv_kernel"] and out.shape == (tokens, 64)
    assert_close(
        out, reference.quant_matmul_parts(x, parts, 512), RATIO[torch.float32], f"{first.name}+{second.name}"
    )
