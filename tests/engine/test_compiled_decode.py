"""`LLM(compile_decode=True)`: CPU decode batches run their experts through the torch.compile'd gathered form."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams
from engine.kernels.fused_moe.gathered import gathered_moe
from engine.kernels.fused_moe.reference import fused_moe


@pytest.mark.parametrize("tokens", [1, 5])
def test_gathered_moe_matches_reference(tokens: int) -> None:
    gen = torch.Generator().manual_seed(tokens)
    experts, hidden, inter, top_k = 8, 32, 16, 3
    x = torch.randn(tokens, hidden, generator=gen)
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen)
    w_down = torch.randn(experts, hidden, inter, generator=gen)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=gen).softmax(-1)
    expected = fused_moe(x, w_gate_up, w_down, weights, ids)
    # Only the summation order differs from the reference.
    torch.testing.assert_close(
        gathered_moe(x, w_gate_up, w_down, weights, ids), expected, rtol=1e-5, atol=1e-4
    )


def test_compiled_decode_gives_eager_greedy_tokens(tiny_ckpt: Path, tiny_llm: LLM) -> None:
    compiled = LLM(str(tiny_ckpt), device="cpu", progress=False, compile_decode=True)
    assert all(layer.mlp.decode_experts is not None for layer in compiled.model.model.layers)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    for prompts in ([[5, 9, 13, 2]], [[5, 9, 13, 2], [7, 7, 1], [3, 40, 41, 42, 43]]):
        expected = [o.outputs[0].token_ids for o in tiny_llm.generate(prompts, params)]
        got = [o.outputs[0].token_ids for o in compiled.generate(prompts, params)]
        assert got == expected
