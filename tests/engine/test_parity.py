"""The engine computes the same function as transformers' Qwen3_5MoeForCausalLM (fp32, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen3_5MoeForCausalLM

from engine import LLM, SamplingParams
from engine.testing.tiny_checkpoint import make_tiny_checkpoint


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return ((ours - ref).abs().max() / ref.abs().max()).item()


def _hf_logits(model: Qwen3_5MoeForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids[None]).logits[0].float()


@pytest.mark.parametrize(
    "layout",
    [
        dict(seed=1),
        dict(seed=2, per_expert_layout=True),
        dict(seed=3, multimodal=True, sharded=True),
        dict(seed=4, multimodal=True, per_expert_layout=True, num_hidden_layers=5, full_attention_interval=2),
        dict(seed=5, num_experts=4, num_experts_per_tok=4, linear_num_value_heads=2, num_key_value_heads=1),
    ],
    ids=["fused", "per-expert", "multimodal-sharded", "mm-per-expert-LFLFL", "gva1-mqa"],
)
def test_logits_match_transformers(tmp_path: Path, layout: dict) -> None:
    path = make_tiny_checkpoint(tmp_path / "ckpt", **layout)
    llm = LLM(str(path), device="cpu", progress=False)
    hf = Qwen3_5MoeForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    ids = torch.randint(0, len(llm.tokenizer), (90,), generator=torch.Generator().manual_seed(layout["seed"]))
    ours, ref = llm.logits(ids), _hf_logits(hf, ids)
    assert ours.shape == ref.shape and ours.dtype == torch.float32
    assert _rel_err(ours, ref) <= 1e-4


def test_layer_types_read_from_config(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(
        tmp_path / "c",
        num_hidden_layers=3,
        layer_types=["full_attention", "linear_attention", "full_attention"],
    )
    llm = LLM(str(path), device="cpu", progress=False)
    assert llm.config.layer_types == ["full_attention", "linear_attention", "full_attention"]
    assert llm.config.rope_theta == 1e7 and llm.config.partial_rotary_factor == 0.25
    hf = Qwen3_5MoeForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    ids = torch.arange(40) % len(llm.tokenizer)
    assert _rel_err(llm.logits(ids), _hf_logits(hf, ids)) <= 1e-4


def test_greedy_48_tokens_equal_transformers_generate(tiny_llm: LLM, hf_model) -> None:
    prompt = tiny_llm.encode("Environment Observation: the file was created.")
    suppressed = list(range(len(tiny_llm.tokenizer), tiny_llm.config.vocab_size))
    with torch.no_grad():
        ref = hf_model.generate(
            torch.tensor([prompt]),
            max_new_tokens=48,
            do_sample=False,
            suppress_tokens=suppressed,
            eos_token_id=None,
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
    out = tiny_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=48, ignore_eos=True))
    assert out[0].outputs[0].token_ids == ref
    assert out[0].outputs[0].finish_reason == "length"


def test_cached_decode_equals_full_forward_each_step(tiny_llm: LLM) -> None:
    prompt = tiny_llm.encode("Let me think about what the tool would return.")
    out = tiny_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    tokens = out[0].outputs[0].token_ids
    full = tiny_llm.logits(prompt + tokens)
    for step, token in enumerate(tokens):
        # the token chosen greedily after step tokens is the argmax of the full forward at that position
        row = full[len(prompt) + step - 1, : len(tiny_llm.tokenizer)]
        assert int(row.argmax()) == token


def test_decode_logits_equal_full_forward(tiny_llm: LLM) -> None:
    """Step the model directly through prefill + cached decode and compare every step's logits."""
    from engine.forward_batch import ForwardBatch

    ids = torch.randint(0, 300, (30,), generator=torch.Generator().manual_seed(9))
    full = tiny_llm.logits(ids)
    with tiny_llm.cache_manager.borrowed_slot() as slot:
        tiny_llm.cache.reset(slot)
        prefix = 10
        batch = ForwardBatch.build([slot], [0], [prefix], torch.device("cpu"))
        steps = [tiny_llm.model(ids[:prefix], batch, tiny_llm.cache)[0]]
        for pos in range(prefix, 30 - 1):
            batch = ForwardBatch.build([slot], [pos], [1], torch.device("cpu"))
            steps.append(tiny_llm.model(ids[pos : pos + 1], batch, tiny_llm.cache)[0])
    assert _rel_err(torch.stack(steps), full[prefix - 1 : 29]) <= 1e-4


def test_chunked_prefill_continuation_equals_full(tiny_llm: LLM) -> None:
    from engine.forward_batch import ForwardBatch

    ids = torch.randint(0, 300, (100,), generator=torch.Generator().manual_seed(11))
    full = tiny_llm.logits(ids)
    with tiny_llm.cache_manager.borrowed_slot() as slot:
        tiny_llm.cache.reset(slot)
        cpu = torch.device("cpu")
        first = tiny_llm.model(
            ids[:70], ForwardBatch.build([slot], [0], [70], cpu), tiny_llm.cache, all_logits=True
        )
        rest = tiny_llm.model(
            ids[70:], ForwardBatch.build([slot], [70], [30], cpu), tiny_llm.cache, all_logits=True
        )
    assert _rel_err(torch.cat([first, rest]), full) <= 1e-4


def test_batch_of_different_lengths_equals_each_alone(tiny_llm: LLM) -> None:
    texts = [
        "Sunny, 24 degrees.",
        "Error: permission denied. The command exited with status 1.",
        "hi",
        "def main():",
    ]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    batched = tiny_llm.generate(texts, params)
    for text, out in zip(texts, batched, strict=True):
        alone = tiny_llm.generate([text], params)[0]
        assert out.outputs[0].token_ids == alone.outputs[0].token_ids


def test_more_requests_than_slots(tiny_ckpt: Path) -> None:
    llm = LLM(str(tiny_ckpt), device="cpu", progress=False, max_num_seqs=2, max_model_len=64)
    assert llm.cache.num_slots == 2
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    outs = llm.generate(["a", "bb", "ccc", "dddd", "e"], params)
    assert [len(o.outputs[0].token_ids) for o in outs] == [5] * 5
    assert outs[0].outputs[0].token_ids == llm.generate(["a"], params)[0].outputs[0].token_ids
    assert llm.cache_manager.num_free == 2
