"""Sampling, stopping, thinking budget, streaming and cancellation on a tiny checkpoint."""

from __future__ import annotations

import threading

import pytest
import torch

from engine import LLM, SamplingParams
from engine.reasoning import ReasoningStreamSplitter, split_reasoning
from engine.sampling import sample_token

CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]


def _ids(out) -> list[int]:
    return out[0].outputs[0].token_ids


def test_seeded_sampling_is_reproducible(tiny_llm: LLM) -> None:
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=16, seed=123, ignore_eos=True)
    first = _ids(tiny_llm.generate(["Action: read the file"], params))
    again = _ids(tiny_llm.generate(["Action: read the file"], params))
    other = _ids(
        tiny_llm.generate(["Action: read the file"], SamplingParams(**{**params.__dict__, "seed": 7}))
    )
    assert first == again
    assert first != other
    # the seed belongs to the request: batching it with another request does not change its tokens
    batched = tiny_llm.generate(
        ["Action: read the file", "something else"], [params, SamplingParams(temperature=1.0)]
    )
    assert batched[0].outputs[0].token_ids == first


def test_sampler_top_k_and_top_p_restrict_choices() -> None:
    logits = torch.tensor([5.0, 4.0, 3.0, -1.0, -2.0])
    gen = torch.Generator().manual_seed(0)
    picks = {sample_token(logits, SamplingParams(temperature=1.0, top_k=2), gen) for _ in range(200)}
    assert picks == {0, 1}
    picks = {sample_token(logits, SamplingParams(temperature=1.0, top_p=0.5), gen) for _ in range(50)}
    assert picks == {0}
    assert sample_token(logits, SamplingParams(temperature=0), None) == 0


def test_never_emits_padded_vocab_ids(tiny_llm: LLM) -> None:
    assert tiny_llm.config.vocab_size > len(tiny_llm.tokenizer)
    params = SamplingParams(temperature=5.0, max_tokens=64, seed=1, ignore_eos=True)
    assert max(_ids(tiny_llm.generate(["x"], params))) < len(tiny_llm.tokenizer)


def test_stop_token_and_stop_string(tiny_llm: LLM) -> None:
    greedy = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    free = tiny_llm.generate(["The world model"], greedy)[0].outputs[0]
    stop_id = free.token_ids[5]
    out = tiny_llm.generate(
        ["The world model"], SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop_id])
    )
    assert out[0].outputs[0].token_ids == free.token_ids[: free.token_ids.index(stop_id) + 1]
    assert out[0].outputs[0].finish_reason == "stop"
    text = free.text
    needle = text[len(text) // 2 : len(text) // 2 + 3]
    stopped = tiny_llm.generate(
        ["The world model"], SamplingParams(temperature=0, max_tokens=30, stop=[needle])
    )
    assert stopped[0].outputs[0].text == text[: text.index(needle)]
    assert stopped[0].outputs[0].finish_reason == "stop"


def test_stops_on_eos_tokens(tiny_llm: LLM) -> None:
    im_end = tiny_llm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    eot = tiny_llm.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert {im_end, eot} <= tiny_llm._stop_ids
    # Make <|im_end|> the greedy choice after the prompt: a scaled copy of the winning row outscores it.
    head = tiny_llm.model.lm_head.weight
    saved = head[im_end].clone()
    prompt = tiny_llm.encode("hello")
    winner = int(tiny_llm.logits(prompt)[-1, : len(tiny_llm.tokenizer)].argmax())
    try:
        with torch.no_grad():
            head[im_end] = 10 * head[winner]
        assert int(tiny_llm.logits(prompt)[-1].argmax()) == im_end
        out = tiny_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=10))[0].outputs[0]
        assert out.finish_reason == "stop" and out.token_ids == [im_end] and out.text == ""
        ignored = tiny_llm.generate([prompt], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
        assert len(_ids(ignored)) == 3
    finally:
        with torch.no_grad():
            head[im_end] = saved


def test_thinking_budget_forces_end_of_thinking(tiny_llm: LLM) -> None:
    think_end = tiny_llm.tokenizer.convert_tokens_to_ids("</think>")
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, thinking_budget=5)
    out = tiny_llm.chat(CHAT, params, enable_thinking=True)[0].outputs[0]
    ids = out.token_ids
    assert think_end in ids and ids.index(think_end) <= 5
    assert len(ids) == 20  # the answer continues after the forced </think>
    no_think = tiny_llm.chat(CHAT, params, enable_thinking=False)[0].outputs[0]
    unforced = [t for t in no_think.token_ids if t == think_end]
    free = tiny_llm.chat(
        CHAT, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True), enable_thinking=False
    )
    assert unforced == [t for t in _ids(free) if t == think_end]  # the budget only acts inside thinking


def test_stream_yields_the_same_text_and_can_be_cancelled(tiny_llm: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=25, ignore_eos=True)
    whole = tiny_llm.chat(CHAT, params)[0].outputs[0]
    deltas = list(tiny_llm.stream_chat(CHAT, params))
    assert "".join(d.text for d in deltas) == whole.text
    assert [t for d in deltas for t in d.token_ids] == whole.token_ids
    assert deltas[-1].finished and deltas[-1].finish_reason == "length"

    cancel = threading.Event()
    seen = []
    for delta in tiny_llm.stream_chat(
        CHAT, SamplingParams(temperature=0, max_tokens=500, ignore_eos=True), stop=cancel
    ):
        seen.append(delta)
        if delta.num_generated >= 3:
            cancel.set()
    # The loop stops at its next step after the cancel; how far it ran ahead of this consumer before the cancel is
    # the machine's speed (5 beside two CPU-bound processes): "long before max_tokens", with a 10x margin.
    assert seen[-1].finish_reason == "abort" and seen[-1].num_generated <= 50
    assert tiny_llm.cache_manager.num_free == tiny_llm.cache_manager.num_slots


def test_reasoning_split() -> None:
    assert split_reasoning("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_reasoning("plan</think>answer") == ("plan", "answer")
    assert split_reasoning("still thinking") == ("still thinking", "")
    assert split_reasoning("plain answer", thinking=False) == ("", "plain answer")
    splitter = ReasoningStreamSplitter()
    parts = [splitter.feed(piece) for piece in ["pl", "an</th", "ink>\n\nans", "wer"]] + [splitter.flush()]
    assert "".join(p[0] for p in parts) == "plan" and "".join(p[1] for p in parts) == "answer"


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_p=0), dict(max_tokens=0)])
def test_invalid_params(bad: dict) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**bad)
