"""The decode MoE kernels (engine/kernels/quant_moe/pairs.py; interpreted) against the torch reference at the
router widths that shape their down projection: top-8 (eight experts side by side in each program, as the
released model runs), top-9 (the bf16 model with its shared expert folded in: not a power of two), top-20 (more
experts than a program's rows: two passes), for GGUF blocks and bf16/fp32 experts."""

from __future__ import annotations

import pytest
import torch

from engine.kernels.fused_moe import reference as dense_reference
from engine.kernels.fused_moe import triton as fused_triton
from engine.kernels.quant_moe import pairs
from engine.kernels.quant_moe import reference as quant_reference
from engine.quant.formats import GGMLType
from engine.testing.quant_recipe import random_blocks
from tests.kernels.numerics import assert_close

pytestmark = pytest.mark.usefixtures("poisoned_allocations")

HIDDEN, INTER = 256, 256


def _routing(tokens: int, experts: int, top_k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    weights, ids = torch.rand(tokens, experts, generator=gen).topk(top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids


@pytest.mark.parametrize(("tokens", "experts", "top_k"), [(1, 16, 8), (3, 12, 9), (2, 24, 20)])
def test_quantized_experts(tokens: int, experts: int, top_k: int) -> None:
    gate = random_blocks(GGMLType.Q4_K, (experts, INTER), HIDDEN, HIDDEN**-0.5, seed=1)
    up = random_blocks(GGMLType.Q5_K, (experts, INTER), HIDDEN, HIDDEN**-0.5, seed=2)
    down = random_blocks(GGMLType.Q6_K, (experts, HIDDEN), INTER, INTER**-0.5, seed=3)
    args = (gate, GGMLType.Q4_K, up, GGMLType.Q5_K, down, GGMLType.Q6_K, *_routing(tokens, experts, top_k))
    x = torch.randn(tokens, HIDDEN)
    assert_close(pairs.routed_pairs(x, *args), quant_reference.quant_moe(x, *args), 1e-5, f"top-{top_k}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("tokens", "top_k"), [(1, 9), (4, 8)])
def test_float_experts(tokens: int, top_k: int, dtype: torch.dtype) -> None:
    """fused_moe's decode path: the experts' own dtype through the same kernels (hidden and inter not whole
    256-column steps)."""
    experts, hidden, inter = 12, 96, 80
    w_gate_up = (torch.randn(experts, 2 * inter, hidden) / hidden**0.5).to(dtype)
    w_down = (torch.randn(experts, hidden, inter) / inter**0.5).to(dtype)
    weights, ids = _routing(tokens, experts, top_k, seed=tokens)
    x = torch.randn(tokens, hidden).to(dtype)
    expected = dense_reference.fused_moe(x, w_gate_up, w_down, weights, ids)
    ratio = 1e-5 if dtype == torch.float32 else 4e-2  # the interpreter's bf16 stores truncate
    assert_close(
        fused_triton.fused_moe_pairs(x, w_gate_up, w_down, weights, ids), expected, ratio, str(dtype)
    )


def test_down_projection_takes_a_tokens_experts_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """At batch 1 with top-8 the down kernel holds all 8 experts in each program (KP = 8) and its grid runs over
    blocks of hidden rows only: the experts are not walked one after another."""
    launches: list[tuple[tuple[int, ...], dict]] = []
    real = pairs._down_kernel

    class Recorder:
        def __getitem__(self, grid):
            launch = real[grid]

            def run(*args, **kwargs):
                launches.append((grid, kwargs))
                return launch(*args, **kwargs)

            return run

    monkeypatch.setattr(pairs, "_down_kernel", Recorder())
    gate = random_blocks(GGMLType.Q4_K, (16, INTER), HIDDEN, HIDDEN**-0.5, seed=1)
    down = random_blocks(GGMLType.Q4_K, (16, HIDDEN), INTER, INTER**-0.5, seed=3)
    args = (gate, GGMLType.Q4_K, gate, GGMLType.Q4_K, down, GGMLType.Q4_K, *_routing(1, 16, 8))
    x = torch.randn(1, HIDDEN)
    out = pairs.routed_pairs(x, *args)
    ((grid, constants),) = launches
    assert constants["KP"] == 8 and constants["TOP_K"] == 8 and grid[0] == 1
    rows_per_program = constants["R"] * constants["NT"] // constants["KP"]
    assert grid[1] == -(-HIDDEN // rows_per_program)
    assert_close(out, quant_reference.quant_moe(x, *args), 1e-5, "value")


def test_gguf_shared_expert_folded_into_the_stacks() -> None:
    """A GGUF block whose shared expert has the routed experts' types runs it as expert E of the stacks (what
    `fuse_weights` does on a GPU): the same output as running it apart, and its projections views of the stacks."""
    from engine.config import Config
    from engine.gguf.loader import build_gguf_model
    from engine.testing.quant_recipe import q4_k_m_table, random_checkpoint

    config = Config(
        vocab_size=320, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256,
        shared_expert_intermediate_size=256, layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    model, _ = build_gguf_model(
        random_checkpoint(config, q4_k_m_table(config)), config, "cpu", torch.float32, False
    )
    block = model.model.layers[1].mlp
    x = torch.randn(3, 256)
    apart = block(x)
    assert not block.shared_folded and block.fold_shared_expert()
    stacks = block.experts.quantized
    assert stacks.num_experts == 5
    shared_down = block.shared_expert.down_proj.weight.parts[0].data
    assert shared_down.data_ptr() == stacks.down.data[4].data_ptr()
    assert_close(block(x), apart, 1e-5, "folded shared expert")
