"""The whole tiny model with every kernel op on its Triton path (interpreted) generates the same greedy tokens
as with the torch references: the kernels are wired in with the right layouts, states and dtypes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.testing.tiny_checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory):
    from engine import LLM

    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny_kernels") / "ckpt", seed=int(torch.randint(100, ()))
    )
    return LLM(str(Path(path)), device="cpu", dtype="float32", max_num_seqs=4, progress=False)


def _greedy(llm, prompts: list[str], max_tokens: int) -> list[list[int]]:
    from engine.sampling import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [out.outputs[0].token_ids for out in llm.generate(prompts, params)]


TRITON_OPS = {
    "engine.kernels.rms_norm.triton": ["rms_norm"],
    "engine.kernels.gated_rms_norm.triton": ["gated_rms_norm"],
    "engine.kernels.qk_norm_rope.triton": ["qk_norm_rope", "qk_norm_rope_to_cache"],
    "engine.kernels.decode_attention.triton": ["decode_attention"],
    "engine.kernels.router_topk.triton": ["router_topk"],
    "engine.kernels.fused_moe.triton": ["fused_moe"],
    "engine.kernels.causal_conv1d.triton": ["causal_conv1d", "causal_conv1d_update"],
    "engine.kernels.gated_delta_rule.triton": ["chunk_gated_delta_rule", "gated_delta_rule_decode"],
}


def _count_triton_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    import importlib

    calls: dict[str, int] = {}
    for module_name, names in TRITON_OPS.items():
        module = importlib.import_module(module_name)
        for name in names:
            calls[name] = 0
            monkeypatch.setattr(module, name, _counting(getattr(module, name), name, calls))
    return calls


def _counting(fn, name: str, calls: dict[str, int]):
    def counted(*args, **kwargs):
        calls[name] += 1
        return fn(*args, **kwargs)

    return counted


def test_triton_kernels_give_the_torch_greedy_tokens(tiny_llm, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_triton_calls(monkeypatch)
    # Two prompts of different lengths: a packed (varlen) prefill, then batched decode steps.
    prompts = ["The world model simulates tools: it reads an action", "Error: permission denied."]
    monkeypatch.setenv("AW_KERNELS", "torch")
    expected = _greedy(tiny_llm, prompts, max_tokens=4)
    logits_torch = tiny_llm.logits(tiny_llm.encode(prompts[0]))
    assert not any(calls.values())
    monkeypatch.setenv("AW_KERNELS", "triton")
    tiny_llm.engine.call(tiny_llm.prefix_cache.clear)  # prefill for real, not from the torch run's snapshots
    assert _greedy(tiny_llm, prompts, max_tokens=4) == expected
    assert all(calls.values()), (
        f"ops that never took the Triton path: {[n for n, c in calls.items() if not c]}"
    )
    logits_triton = tiny_llm.logits(tiny_llm.encode(prompts[0]))
    torch.testing.assert_close(logits_triton, logits_torch, rtol=1e-4, atol=1e-4)
