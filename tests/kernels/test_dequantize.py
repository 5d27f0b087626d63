"""GGUF dequantization, torch reference and Triton (interpreted), against gguf's numpy dequantizer (llama.cpp's
own Python code): exact equality on random blocks of every type.

`random_blocks` (engine/testing/quant_recipe.py: random bytes, the scale fields replaced by sane finite values) and
`gguf_dequantize` are shared with the quantized matmul and MoE tests."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from engine.kernels.dequantize import reference, triton
from engine.quant.formats import FORMATS, QUANTIZED_TYPES, GGMLType
from engine.testing.quant_recipe import random_blocks

QUANTIZED = sorted(QUANTIZED_TYPES)


def gguf_dequantize(blocks: torch.Tensor, kind: GGMLType) -> torch.Tensor:
    """The oracle: gguf.quants.dequantize (numpy, fp32) on the same bytes."""
    out = gguf.quants.dequantize(blocks.numpy(), gguf.GGMLQuantizationType(int(kind)))
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
def test_reference_equals_gguf(kind: GGMLType) -> None:
    blocks = random_blocks(kind, 7, 512, magnitude=0.3)
    expected = gguf_dequantize(blocks, kind)
    assert expected.shape == (7, 512)
    assert torch.equal(reference.dequantize(blocks, kind, 512), expected)
    for dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(reference.dequantize(blocks, kind, 512, dtype), expected.to(dtype)), dtype


@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
def test_reference_expert_tensor_and_strided_rows(kind: GGMLType) -> None:
    """A 3-D [E, rows, row_bytes] expert tensor, and a non-contiguous selection of its rows."""
    blocks = random_blocks(kind, (3, 5), 256, seed=1)
    expected = gguf_dequantize(blocks, kind)
    assert torch.equal(reference.dequantize(blocks, kind, 256), expected)
    assert torch.equal(reference.dequantize(blocks[:, 1::2], kind, 256), expected[:, 1::2])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # gguf's numpy, at e = 255
def test_reference_mxfp4_every_exponent() -> None:
    """All 256 e8m0 exponents, the subnormal scales (e = 0, 1) and overflow to inf (e = 255) included."""
    blocks = random_blocks(GGMLType.MXFP4, 256, 32, seed=2)
    blocks[:, 0] = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(
        reference.dequantize(blocks, GGMLType.MXFP4, 32), gguf_dequantize(blocks, GGMLType.MXFP4)
    )


@pytest.mark.parametrize(
    ("kind", "dtype"),
    [(GGMLType.F32, torch.float32), (GGMLType.F16, torch.float16), (GGMLType.BF16, torch.bfloat16)],
    ids=lambda v: getattr(v, "name", str(v)),
)
def test_reference_float_types(kind: GGMLType, dtype: torch.dtype) -> None:
    weight = torch.randn(4, 64).to(dtype)
    blocks = weight.view(torch.uint8)
    assert torch.equal(reference.dequantize(blocks, kind, 64, dtype), weight)
    assert torch.equal(reference.dequantize(blocks, kind, 64), weight.float())
    # rows at an odd byte offset cannot be viewed in place: copied, same values
    shifted = torch.cat((torch.zeros(1, dtype=torch.uint8), blocks.reshape(-1)))[1:].view(4, -1)
    assert torch.equal(reference.dequantize(shifted, kind, 64, dtype), weight)


def test_reference_rejects_wrong_row_bytes() -> None:
    blocks = random_blocks(GGMLType.Q4_K, 2, 256)
    with pytest.raises(ValueError, match="Q4_K"):
        reference.dequantize(blocks[:, :-1], GGMLType.Q4_K, 256)
    with pytest.raises(ValueError, match="multiples of 256"):
        reference.dequantize(blocks, GGMLType.Q4_K, 100)


@pytest.mark.usefixtures("poisoned_allocations")
@pytest.mark.parametrize("kind", QUANTIZED, ids=lambda k: k.name)
def test_triton_equals_gguf(kind: GGMLType) -> None:
    """The decoder the matmul kernels run (`dequant_tile`), through the dequantize kernel: 19 rows (a partial row
    block), two blocks per row, fp32 and bf16 out."""
    cols = 2 * FORMATS[kind].block_size
    blocks = random_blocks(kind, 19, cols, magnitude=0.3, seed=3)
    expected = gguf_dequantize(blocks, kind)
    assert torch.equal(triton.dequantize(blocks, kind, cols), expected)
    assert torch.equal(
        triton.dequantize(blocks.view(1, 19, -1), kind, cols, torch.float16), expected.half()[None]
    )
