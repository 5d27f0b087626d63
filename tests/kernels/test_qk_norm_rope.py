"""Attention's q/k RMSNorm + partial RoPE: the one-launch Triton kernel (interpreted) vs the torch reference."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.qk_norm_rope import reference, triton
from engine.kernels.rms_norm.reference import rms_norm
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

RATIO = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def _rope(tokens: int, rot: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = torch.arange(tokens, dtype=torch.float32)[:, None] / (
        100.0 ** (torch.arange(rot // 2) / (rot // 2))
    )
    angles = torch.cat([freqs, freqs], -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("tokens", "heads", "kv_heads", "dim", "rot"), [(1, 4, 2, 32, 8), (5, 3, 1, 48, 12)])
def test_qk_norm_rope_matches_the_reference(tokens, heads, kv_heads, dim, rot, dtype) -> None:
    # q as the model has it: a strided view (every head's query next to its gate), k a slice of a wider row.
    q_gate = torch.randn(tokens, heads, 2 * dim).to(dtype)
    q = q_gate[..., :dim]
    kv = torch.randn(tokens, 2 * kv_heads * dim).to(dtype)
    k = kv[:, : kv_heads * dim].reshape(tokens, kv_heads, dim)
    q_w, k_w = (0.1 * torch.randn(dim)).to(dtype), (0.1 * torch.randn(dim)).to(dtype)
    cos, sin = _rope(tokens, rot, dtype)
    q_out, k_out = triton.qk_norm_rope(q, k, q_w, k_w, cos, sin, 1e-6)
    q_ref, k_ref = reference.qk_norm_rope(q, k, q_w, k_w, cos, sin, 1e-6)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    assert_close(q_out, q_ref, RATIO[dtype], "q")
    assert_close(k_out, k_ref, RATIO[dtype], "k")


def test_dims_past_the_rotary_part_are_only_normed() -> None:
    q, k = torch.randn(2, 2, 16), torch.randn(2, 1, 16)
    w = torch.zeros(16)
    cos, sin = _rope(2, 4, torch.float32)
    q_out, k_out = triton.qk_norm_rope(q, k, w, w, cos, sin, 1e-6)
    assert_close(q_out[..., 4:], rms_norm(q, w, 1e-6)[..., 4:], 1e-6, "q tail")
    assert_close(k_out[..., 4:], rms_norm(k, w, 1e-6)[..., 4:], 1e-6, "k tail")
    # Position 0: cos 1, sin 0, so the rotary part is the normed value too.
    assert_close(q_out[0], rms_norm(q[0], w, 1e-6), 1e-6, "q at position 0")
