"""Schema-constrained decoding on the tiny random checkpoint: its free output is garbage, its constrained answers
are valid JSON that validates; thinking stays free; constrained and free rows share a batch unchanged."""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest

from engine import LLM, SamplingParams
from engine.reasoning import split_reasoning
from engine.structured import StructuredOutputError
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
            "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
            "total": {"type": "number"},
            "ok": {"type": "boolean"},
        },
        "required": ["items", "ok"],
    },
    {
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    },
]
CHAT = [{"role": "user", "content": 'Action: {"name": "get_order", "arguments": {"order_id": "A-1"}}'}]


def _answer(llm: LLM, schema: dict | None, seed: int, thinking: bool = False) -> tuple[str, str | None]:
    params = SamplingParams(
        temperature=1.0,
        seed=seed,
        max_tokens=600,
        json_schema=schema,
        thinking_budget=8 if thinking else None,
    )
    out = llm.chat(CHAT, params, enable_thinking=thinking)[0].outputs[0]
    return out.text, out.finish_reason


def _valid(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


def test_constrained_answers_validate_and_free_ones_do_not(tiny_llm: LLM) -> None:
    constrained = free = 0
    compiled_before = tiny_llm.grammars.compiles  # the session's LLM is shared with other test modules
    for i in range(24):
        schema = SCHEMAS[i % len(SCHEMAS)]
        text, finish = _answer(tiny_llm, bounded(schema), seed=i)
        constrained += _valid(text, schema) and finish == "stop"
        free += _valid(_answer(tiny_llm, None, seed=i)[0], schema)
    assert constrained == 24
    assert free == 0  # the random model never writes valid JSON by itself
    assert tiny_llm.grammars.compiles - compiled_before <= len(SCHEMAS)  # one compile per schema, cached


def test_thinking_is_free_and_the_answer_after_it_is_constrained(tiny_llm: LLM) -> None:
    for i, schema in enumerate(SCHEMAS):
        text, finish = _answer(tiny_llm, schema, seed=50 + i, thinking=True)
        reasoning, answer = split_reasoning(text, thinking=True)
        assert reasoning  # the thinking ran free until the budget forced </think>
        assert finish == "stop" and _valid(answer, schema), text


def test_constrained_and_free_rows_in_one_batch_match_their_solo_runs(tiny_llm: LLM) -> None:
    prompts = [f"Action {i}: read the file" for i in range(8)]
    params = [
        SamplingParams(
            temperature=0 if i % 4 else 0.8,
            seed=i,
            max_tokens=40,
            ignore_eos=False,
            json_schema=SCHEMAS[i % 3] if i % 2 == 0 else None,
        )
        for i in range(8)
    ]
    alone = [tiny_llm.generate(p, params[i])[0].outputs[0].token_ids for i, p in enumerate(prompts)]
    results: list = [None] * 8

    def run(i: int) -> None:
        results[i] = tiny_llm.generate(prompts[i], params[i])[0].outputs[0].token_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == alone


def test_a_schema_the_grammar_cannot_take_fails_that_request_only(tiny_llm: LLM) -> None:
    with pytest.raises(StructuredOutputError):
        tiny_llm.generate("x", SamplingParams(max_tokens=2, json_schema="{not json"))
    with pytest.raises(ValueError, match="structured_after"):
        SamplingParams(json_schema=SCHEMAS[0], structured_after="<answer>")
    assert tiny_llm.generate("x", SamplingParams(max_tokens=2, ignore_eos=True))[0].outputs[0].token_ids


def test_bundled_world_output_schemas_constrain(tiny_llm: LLM) -> None:
    """Every outputSchema of the bundled worlds compiles, and a constrained answer to it validates."""
    from aw_mcp.load.world import load_world
    from aw_mcp.spec.bundled import bundled_worlds

    schemas = [
        tool.outputSchema for path in bundled_worlds() for tool in load_world(path).tools if tool.outputSchema
    ]
    assert schemas
    for i, schema in enumerate(schemas):
        text, finish = _answer(tiny_llm, bounded(schema), seed=200 + i)
        assert finish == "stop" and _valid(text, schema), (schema, text)


def test_engine_serve_takes_response_format(tiny_llm: LLM) -> None:
    from starlette.testclient import TestClient

    from engine.server import build_app

    client = TestClient(build_app(tiny_llm, "tiny"))
    schema = SCHEMAS[0]
    body = {
        "messages": CHAT,
        "temperature": 1.0,
        "seed": 3,
        "max_tokens": 600,
        "chat_template_kwargs": {"enable_thinking": False},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": bounded(schema)},
        },
    }
    reply = client.post("/v1/chat/completions", json=body).json()
    assert _valid(reply["choices"][0]["message"]["content"], schema), reply
    bad = {**body, "response_format": {"type": "json_schema"}}
    assert client.post("/v1/chat/completions", json=bad).status_code == 400


def test_constrained_strings_are_valid_utf8_no_encoded_surrogates(tmp_path) -> None:
    """xgrammar's string rule admits 0xED 0xA0-0xBF (an encoded surrogate: not UTF-8, decoded as U+FFFD, and it
    broke this schema's maxLength). Seed 0's checkpoint wrote two such strings in these 40 greedy answers before
    the guard; every answer must now decode cleanly and validate."""
    from engine.testing.tiny_checkpoint import make_tiny_checkpoint

    schema = SAMPLE_SCHEMA
    llm = LLM(
        make_tiny_checkpoint(tmp_path, seed=0).as_posix(),
        device="cpu",
        progress=False,
        enable_prefix_caching=False,
        max_model_len=1024,
    )
    try:
        params = SamplingParams(temperature=0, max_tokens=256, ignore_eos=True, json_schema=bounded(schema))
        outs = llm.generate([[5 + i, 9, 13] for i in range(40)], params)
        guard = llm.grammars.utf8_guard()
    finally:
        llm.shutdown()
    texts = [o.outputs[0].text for o in outs]
    assert [t for t in texts if "\ufffd" in t or not _valid(t, schema)] == []
    ends_in_ed, tails = guard
    assert ends_in_ed and tails.any()  # the byte-level vocabulary has both halves as tokens
