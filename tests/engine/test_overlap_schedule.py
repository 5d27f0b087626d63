"""The overlapped step loop (engine/llm_engine.py, `AW_OVERLAP_SCHEDULE`; on by default on a GPU): a step's tokens
are settled (detokenized, stop-checked, streamed, retired) while the next step runs, and a sequence they finish has
its row of that next step dropped. On CPU nothing runs asynchronously, so these tests check what it must keep:
every request's tokens, text and finish reason as in the serial loop, in mixed batches whose requests end at
different steps and for different reasons, and that the next step really is launched before the settling."""

from __future__ import annotations

import threading

import pytest

from engine import LLM, SamplingParams
from engine.testing.bounded import bounded

CHAT = [{"role": "user", "content": 'Action: {"name": "get_order", "arguments": {"order_id": "A-1"}}'}]
SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "status": {"enum": ["open", "cancelled", "shipped"]}},
    "required": ["order_id", "status"],
    "additionalProperties": False,
}


def _requests(llm: LLM) -> tuple[list, list[SamplingParams]]:
    chat = llm.render_chat(CHAT)
    greedy = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    probe = llm.generate(["The world model"], greedy)[0].outputs[0]
    prompts = [
        "The world model",
        "hi",
        "The world model",
        chat,
        "ls -la /tmp",
        chat,
        "The world model",
        "x" * 80,
    ]
    params = [
        SamplingParams(temperature=0, max_tokens=3, ignore_eos=True),  # ends first, by length
        SamplingParams(temperature=0, max_tokens=17, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=30, stop=[probe.text[6:10]]),  # a stop string mid-way
        SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, thinking_budget=4),  # a forced </think>
        SamplingParams(temperature=0.9, max_tokens=12, seed=5, repetition_penalty=1.3, ignore_eos=True),
        SamplingParams(
            temperature=1.0, max_tokens=200, seed=2, json_schema=bounded(SCHEMA), thinking_budget=6
        ),
        SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[probe.token_ids[8]]),
        SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),  # ends at the cache's length
    ]
    return prompts, params


def _outcome(outputs) -> list[tuple]:
    return [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].finish_reason) for o in outputs]


def test_mixed_batch_ends_as_in_the_serial_loop(overlap_engines: dict[bool, LLM]) -> None:
    results = {overlap: _outcome(llm.generate(*_requests(llm))) for overlap, llm in overlap_engines.items()}
    assert results[True] == results[False]
    reasons = [reason for _, _, reason in results[True]]
    assert reasons.count("stop") >= 2 and reasons.count("length") >= 4  # requests ended for each reason


def test_requests_joining_a_running_batch(overlap_engines: dict[bool, LLM]) -> None:
    """More requests than slots: each waits for a slot that a finished one frees (a step later with overlap)."""
    prompts = [f"request number {i}" for i in range(9)]
    params = [SamplingParams(temperature=0, max_tokens=2 + 3 * (i % 4), ignore_eos=True) for i in range(9)]
    results = {overlap: _outcome(llm.generate(prompts, params)) for overlap, llm in overlap_engines.items()}
    assert results[True] == results[False]


def test_stream_and_cancel(overlap_engines: dict[bool, LLM]) -> None:
    params = SamplingParams(temperature=0, max_tokens=25, ignore_eos=True)
    texts = {
        overlap: "".join(d.text for d in llm.generate_stream("The world model", params))
        for overlap, llm in overlap_engines.items()
    }
    assert texts[True] == texts[False] != ""
    cancel = threading.Event()
    stream = overlap_engines[True].generate_stream(
        "The world model", SamplingParams(temperature=0, max_tokens=500, ignore_eos=True), stop=cancel
    )
    deltas = []
    for delta in stream:
        deltas.append(delta)
        cancel.set()
    assert deltas[-1].finished and deltas[-1].finish_reason == "abort" and deltas[-1].num_generated < 500


def test_the_next_step_launches_before_the_settling(
    overlap_engines: dict[bool, LLM], monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = overlap_engines[True]
    events: list[str] = []
    decode, settle = llm.engine.runner.decode, llm.engine._settle

    def recording_decode(seqs, tokens=None):
        events.append("launch")
        return decode(seqs, tokens)

    def recording_settle():
        if llm.engine._unsettled:
            events.append("settle")
        settle()

    monkeypatch.setattr(llm.engine.runner, "decode", recording_decode)
    monkeypatch.setattr(llm.engine, "_settle", recording_settle)
    out = llm.generate("The world model", SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 6
    # Token 1 comes from the prefill; tokens 2..6 from five decodes. Each token is settled after the next step was
    # launched: the decode that feeds token k launches before token k is settled.
    assert events == ["launch", "settle"] * 6
