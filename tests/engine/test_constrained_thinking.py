"""Constrained answers with thinking on (issue 21 item 8): until `</think>`, a request whose answer is constrained
cannot stop (its stop tokens are masked and stop strings are not looked for in its thinking), so it never ends
with an empty answer; once the grammar is active, the grammar decides, and it allows the end token only when the
answer is complete. On the tiny random checkpoint, whose free output is garbage."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from engine import LLM, SamplingParams
from engine.reasoning import split_reasoning
from engine.structured import AnswerFormat, answer_pending
from engine.testing.bounded import SAMPLE_SCHEMA, bounded

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "status": {"enum": ["open", "cancelled", "shipped"]},
        },
        "required": ["order_id", "status"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "integer"}},
            "total": {"type": "number"},
            "ok": {"type": "boolean"},
        },
        "required": ["items", "ok"],
    },
    {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    SAMPLE_SCHEMA,
]
PREFIX = "**Environment Observation:**\n"
CHAT = [{"role": "user", "content": 'Action: {"name": "get_order", "arguments": {"order_id": "A-1"}}'}]
SHORT = {
    "type": "object",
    "properties": {"message": {"type": "string", "maxLength": 8}},
    "required": ["message"],
}


def _format(i: int) -> dict | AnswerFormat:
    """Mixed formats: the plain schemas (bounded, so a random model finishes them) and, every fifth, one framed
    in the trained marker and pretty-printed."""
    schema = bounded(SCHEMAS[i % len(SCHEMAS)])
    return AnswerFormat(schema, prefix=PREFIX, indent=2) if i % 5 == 4 else schema


def _valid(answer: str, i: int) -> bool:
    if i % 5 == 4:
        if not answer.startswith(PREFIX):
            return False
        answer = answer[len(PREFIX) :]
    try:
        jsonschema.validate(json.loads(answer), SCHEMAS[i % len(SCHEMAS)])
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


def test_constrained_answers_with_thinking_on_all_validate(tiny_llm: LLM) -> None:
    """48 sampled requests, mixed schemas, thinking on, one batch: every one ends with a valid answer after its
    thinking (before the fix, a few of them sampled an end token while thinking: `stop` with an empty answer)."""
    n = 48
    params = [
        SamplingParams(
            temperature=1.0, seed=1000 + i, max_tokens=200, json_schema=_format(i), thinking_budget=8
        )
        for i in range(n)
    ]
    outs = tiny_llm.chat([CHAT] * n, params, enable_thinking=True)
    invalid = []
    for i, out in enumerate(outs):
        completion = out.outputs[0]
        reasoning, answer = split_reasoning(completion.text, thinking=True)
        if not (completion.finish_reason == "stop" and _valid(answer, i)):
            invalid.append((i, completion.finish_reason, completion.text))
    assert not invalid, f"{len(invalid)}/{n} invalid: {invalid[:3]}"


def _end_tokens_first(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Script the model: every step's logits put the end tokens (`<|im_end|>`, `<|endoftext|>`) on top."""
    runner = llm.engine.runner
    eos = sorted(llm.processor.stop_ids)

    def on_top(forward):
        def scripted(*args, **kwargs):
            logits = forward(*args, **kwargs).clone()
            logits[:, eos] = logits.amax(-1, keepdim=True) + 10.0
            return logits

        return scripted

    monkeypatch.setattr(runner, "prefill", on_top(runner.prefill))
    monkeypatch.setattr(runner, "decode", on_top(runner.decode))
    return eos


def test_an_end_token_on_top_cannot_end_the_thinking_of_a_constrained_request(
    tiny_llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: greedy, with an end token the argmax at every step, a constrained request used to stop at its
    first thinking token with an empty answer. Now its thinking runs until the budget forces `</think>`, then the
    grammar holds the end token off until the answer is complete, and the answer validates. A request without a
    schema still stops at once."""
    eos = _end_tokens_first(tiny_llm, monkeypatch)
    constrained = SamplingParams(temperature=0, max_tokens=120, json_schema=SHORT, thinking_budget=5)
    sampled = SamplingParams(temperature=1.0, seed=3, max_tokens=120, json_schema=SHORT, thinking_budget=5)
    free = SamplingParams(temperature=0, max_tokens=120, thinking_budget=5)
    outs = tiny_llm.chat([CHAT] * 3, [constrained, sampled, free], enable_thinking=True)
    for out in outs[:2]:
        completion = out.outputs[0]
        reasoning, answer = split_reasoning(completion.text, thinking=True)
        assert completion.finish_reason == "stop", completion
        assert reasoning, completion.text
        jsonschema.validate(json.loads(answer), SHORT)
        ids = completion.token_ids
        think_end = ids.index(tiny_llm.processor.think_end)
        assert think_end == 5 and not set(ids[:think_end]) & set(eos)  # the budget ended the thinking
        assert ids[-1] in eos  # the grammar's end token, once the answer was complete
    free_ids = outs[2].outputs[0].token_ids
    assert len(free_ids) == 1 and free_ids[0] in eos  # no schema: the end token stops it at once


def test_a_stop_string_in_the_thinking_does_not_end_a_constrained_request(tiny_llm: LLM) -> None:
    """A stop string the (greedy) thinking writes ends a free request in its thinking; a constrained one
    thinks on and answers (stop strings are looked for in its answer only)."""
    free = SamplingParams(temperature=0, max_tokens=40, thinking_budget=6)
    thinking = split_reasoning(tiny_llm.chat(CHAT, free)[0].outputs[0].text, thinking=True)[0]
    stop = thinking.strip()[:2]
    assert stop
    stopped = tiny_llm.chat(
        CHAT, SamplingParams(temperature=0, max_tokens=40, thinking_budget=6, stop=[stop])
    )
    assert stopped[0].outputs[0].finish_reason == "stop" and "</think>" not in stopped[0].outputs[0].text
    params = SamplingParams(temperature=0, max_tokens=120, thinking_budget=6, stop=[stop], json_schema=SHORT)
    completion = tiny_llm.chat(CHAT, params)[0].outputs[0]
    reasoning, answer = split_reasoning(completion.text, thinking=True)
    assert stop in reasoning
    assert completion.finish_reason == "stop"
    jsonschema.validate(json.loads(answer), SHORT)


def test_stop_tokens_are_masked_before_think_end_and_allowed_once_the_answer_is_complete(
    tiny_llm: LLM,
) -> None:
    """sample on scripted logits (end tokens on top): a constrained row in its thinking never takes one (nor
    a token in its own stop_token_ids), a free row does; after `</think>` the grammar bars it mid-answer and
    allows it once the answer is complete."""
    runner, processor = tiny_llm.engine.runner, tiny_llm.processor
    eos = sorted(processor.stop_ids)
    own_stop = tiny_llm.tokenizer.convert_tokens_to_ids("a")
    prompt = tiny_llm.render_chat(CHAT, enable_thinking=True)
    seqs = tiny_llm._make_sequences(
        [prompt] * 3,
        [
            SamplingParams(temperature=0, json_schema=SHORT),
            SamplingParams(temperature=0),
            SamplingParams(temperature=0.7, seed=1, json_schema=SHORT, stop_token_ids=[own_stop]),
        ],
        None,
    )
    constrained, free, own = seqs
    assert answer_pending(constrained.constraint) and not answer_pending(free.constraint)
    vocab = tiny_llm.config.vocab_size

    def scripted(on_top: list[int]) -> torch.Tensor:
        logits = torch.zeros(len(seqs), vocab)
        logits[:, on_top] = 10.0
        return logits

    for _ in range(3):  # sampled rows too: the masked ids have probability 0
        picked = runner.sample(seqs, scripted(eos + [own_stop]), processor).tolist()
        assert picked[0] not in eos and picked[1] in eos
        assert picked[2] not in eos and picked[2] != own_stop

    processor.append_token(constrained, processor.think_end)  # the thinking ends: the grammar takes over
    assert constrained.constraint.active and not answer_pending(constrained.constraint)
    for token in tiny_llm.tokenizer.encode('{"message": "hi"', add_special_tokens=False):
        processor.append_token(constrained, token)
    (mid_answer,) = runner.sample([constrained], scripted(eos)[:1], processor).tolist()
    assert mid_answer not in eos  # the grammar: the object is not closed yet
    processor.append_token(constrained, tiny_llm.tokenizer.convert_tokens_to_ids("}"))
    assert not constrained.finished
    (done,) = runner.sample([constrained], scripted(eos)[:1], processor).tolist()
    assert done in eos  # the answer is complete: the end token is allowed
    processor.append_token(constrained, done)
    assert constrained.finish_reason == "stop"
    assert split_reasoning(constrained.text, thinking=True)[1] == '{"message": "hi"}'
