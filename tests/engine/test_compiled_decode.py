"""`LLM(compile_decode=True)`: CPU decode batches run through the torch.compile'd per-layer regions, and give the
eager engine's function: the same greedy tokens, logits equal up to summation order, the same cache states."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine import LLM, SamplingParams
from engine.forward_batch import ForwardBatch
from engine.kernels.fused_moe.gathered import gathered_moe
from engine.kernels.fused_moe.reference import fused_moe
from engine.layers.linear import linear


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


@pytest.mark.parametrize("rows", [1, 2, 7, 128, 129, 300])
def test_linear_equals_f_linear_in_every_orientation(rows: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 48, generator=gen), torch.randn(80, 48, generator=gen)
    out = linear(x, w)
    assert out.shape == (rows, 80)
    torch.testing.assert_close(out, F.linear(x, w), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def compiled_llm(tiny_ckpt: Path) -> LLM:
    return LLM(str(tiny_ckpt), device="cpu", progress=False, compile_decode=True)


def test_every_layer_gets_the_shared_regions(compiled_llm: LLM) -> None:
    regions = compiled_llm.model.decode_regions
    assert regions is not None
    assert all(layer.decode_region is regions for layer in compiled_llm.model.model.layers)


def test_compiled_decode_gives_eager_greedy_tokens(compiled_llm: LLM, tiny_llm: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    for prompts in ([[5, 9, 13, 2]], [[5, 9, 13, 2], [7, 7, 1], [3, 40, 41, 42, 43]]):
        expected = [o.outputs[0].token_ids for o in tiny_llm.generate(prompts, params)]
        got = [o.outputs[0].token_ids for o in compiled_llm.generate(prompts, params)]
        assert got == expected


def test_the_step_loop_thread_allows_a_graph_per_batch_size(compiled_llm: LLM) -> None:
    """Dynamo's recompile limit is per thread: the regions lift it on the loop thread that runs them (left at 8,
    batch sizes past the 8th graph silently fell back to eager)."""
    import torch._dynamo

    compiled_llm.generate([[5, 9, 13, 2]], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    regions = compiled_llm.model.decode_regions
    limit = compiled_llm.engine.call(lambda: torch._dynamo.config.recompile_limit)
    assert limit >= regions.recompile_limit > 2 * 8


@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_decode_step_matches_eager_logits_and_states(
    compiled_llm: LLM, tiny_llm: LLM, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One decode step after the same prefill, in both engines: logits and every cache tensor it writes."""
    gen = torch.Generator().manual_seed(batch)
    prompts = [torch.randint(0, 200, (4 + i,), generator=gen).tolist() for i in range(batch)]
    slots, lengths = list(range(batch)), [len(p) for p in prompts]
    regions = compiled_llm.model.decode_regions
    calls: list[str] = []
    for name in ("deltanet_layer", "moe_tail", "one_row_logits"):
        compiled = getattr(regions, name)
        monkeypatch.setattr(regions, name, lambda *a, _f=compiled, _n=name: calls.append(_n) or _f(*a))
    results = []
    for llm in (tiny_llm, compiled_llm):
        cache = llm.cache
        for t in (cache.keys, cache.values, cache.conv, cache.recurrent):
            t.zero_()
        ids = torch.tensor([t for p in prompts for t in p])
        llm.model(ids, ForwardBatch.build(slots, [0] * batch, lengths, llm.device), cache)
        step = ForwardBatch.build(slots, lengths, [1] * batch, llm.device)
        assert step.is_decode
        logits = llm.model(torch.tensor([p[-1] for p in prompts]), step, cache)
        results.append((logits, cache.conv[:, :batch].clone(), cache.recurrent[:, :batch].clone()))
    layer_types = [layer.is_full_attention for layer in compiled_llm.model.model.layers]
    assert calls.count("deltanet_layer") == layer_types.count(
        False
    )  # only the decode step: prefill stays eager
    assert calls.count("moe_tail") == layer_types.count(True)
    assert calls.count("one_row_logits") == (batch == 1)
    (eager_logits, eager_conv, eager_state), (logits, conv, state) = results
    torch.testing.assert_close(logits, eager_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(conv, eager_conv, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state, eager_state, rtol=1e-4, atol=1e-5)


def test_a_region_that_cannot_compile_leaves_an_eager_engine(
    tiny_ckpt: Path, tiny_llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No C++ compiler (or an Inductor failure): a warning, then the eager engine's tokens, nothing half-written."""

    def broken_compile(fn, **kwargs):
        def run(*args):
            raise RuntimeError("InductorError: no working C++ compiler found")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    llm = LLM(str(tiny_ckpt), device="cpu", progress=False, compile_decode=True)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompts = [[5, 9, 13, 2], [7, 7, 1]]
    with pytest.warns(RuntimeWarning, match="compiled CPU decode is off.*no working C\\+\\+ compiler"):
        got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    assert not llm.model.decode_regions.enabled
    assert got == [o.outputs[0].token_ids for o in tiny_llm.generate(prompts, params)]
