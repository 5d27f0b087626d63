"""Constrained observations on the tiny random checkpoint, whose free output is garbage: framed answers (the trained
marker or tags, indented JSON, or a plain-text error line), relaxed schemas that compile, and every output schema
of the bundled worlds and the imported OpenAPI examples answered validly at the first attempt through the real
pipeline (Simulator → local backend → engine → parser → outputSchema). A smaller sample of
bench/structured_validity.py, which holds the harness."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import re
import sys
from pathlib import Path

import jsonschema
import pytest

from aw_mcp.prompt.constraint import answer_schema, error_text_regex, relax
from engine import LLM, SamplingParams
from engine.structured import AnswerFormat, StructuredOutputError
from engine.testing.bounded import bounded
from tests.conftest import REPO

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id", "n"],
}
CHAT = [{"role": "user", "content": 'Action: {"name": "get_order", "arguments": {"order_id": "A-1"}}'}]


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "structured_validity", REPO / "bench" / "structured_validity.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("prefix", "suffix"),
    [("**Environment Observation:**\n", ""), ("<predicted_observation>\n", "\n</predicted_observation>")],
)
def test_framed_answers_are_json_for_the_schema_or_an_error_line(
    tiny_llm: LLM, prefix: str, suffix: str
) -> None:
    answer = AnswerFormat(
        bounded(answer_schema(SCHEMA)),
        prefix=prefix,
        suffix=suffix,
        alternative=error_text_regex(40),
        indent=2,
    )
    for seed in range(12):
        params = SamplingParams(
            temperature=1.0, seed=seed, max_tokens=400, json_schema=answer, structured_after=None
        )
        out = tiny_llm.chat(CHAT, params, enable_thinking=False)[0].outputs[0]
        assert out.finish_reason == "stop" and out.text.startswith(prefix) and out.text.endswith(suffix), (
            out.text
        )
        body = out.text[len(prefix) : len(out.text) - len(suffix)]
        if body.startswith("Error: "):
            # one line, no control characters (the random model's stray bytes may decode as U+FFFD)
            assert re.fullmatch(r"Error: [^\x00-\x1f]+", body), body
            continue
        value = json.loads(body)
        assert body == json.dumps(value, indent=2, ensure_ascii=False)  # the trained layout
        jsonschema.validate(value, answer_schema(SCHEMA))  # the result, or the error body


def test_relaxed_schemas_compile_where_the_originals_do_not(tiny_llm: LLM) -> None:
    refused = [
        {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a)\\1$"}}},
        {"type": "object", "properties": {"word": {"type": "string", "pattern": "^\\p{L}+$"}}},
        {"type": "object", "properties": {"gone": False, "id": {"type": "string"}}},
    ]
    ignored = [
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
        {"type": "object", "propertyNames": {"pattern": "^a"}},
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "contains": {"const": 1}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "not": {"required": ["a"]}},
    ]
    for schema in refused:
        with pytest.raises(StructuredOutputError):
            tiny_llm.compile_schema(AnswerFormat(answer_schema(schema), indent=2))
    for schema in refused + ignored:
        relaxed, notes = relax(schema)
        assert notes
        tiny_llm.compile_schema(AnswerFormat(answer_schema(relaxed), indent=2))


def test_every_bundled_and_imported_output_schema_is_answered_validly_at_the_first_attempt(
    tiny_ckpt: Path,
) -> None:
    bench = load_bench()
    plan = bench.targets()
    assert len(plan) >= 15 and any(t.tool.outputWrapper for t in plan)
    backend = bench.BoundedLocal(str(tiny_ckpt), device="cpu")
    short = "Simulate these tools:\n{tool_definitions}"  # the prompt's length is not what is tested here
    try:
        for mode in ("result-only", "constrained"):
            # 2,000: a bounded answer of the random model (byte-garbage strings) can pass 900 tokens before it closes
            counts, total = asyncio.run(bench.run_mode(backend, plan, mode, 2000, template=short))
            assert counts["invalid"] == 0 and total == len(plan), (mode, counts)
            if mode == "result-only":
                assert counts["result"] == total
        counts, total = asyncio.run(bench.run_mode(backend, plan[:3], "free", 200, template=short))
        assert counts["invalid"] == total  # the random model's own output is never a valid observation
    finally:
        asyncio.run(backend.aclose())


def test_a_grammar_the_engine_refuses_decodes_free_with_one_warning(
    tiny_ckpt: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from aw_mcp.backends.local import LocalWorldModel
    from aw_mcp.core.model_io import AnswerConstraint, GenerationParams

    # Strict objects take no extra keys, so more required properties than declared cannot be met.
    refused = {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2}
    constraint = AnswerConstraint("odd_tool", answer_schema(refused), prefix="**Environment Observation:**\n")
    params = GenerationParams(temperature=1.0, max_tokens=8, thinking=False, seed=1, constraint=constraint)
    backend = LocalWorldModel(str(tiny_ckpt), device="cpu")

    async def twice() -> list[str]:
        messages = [{"role": "user", "content": "x"}]
        return [(await backend.generate(messages, params)).text for _ in range(2)]

    try:
        with caplog.at_level(logging.WARNING, logger="aw_mcp.backends.local"):
            texts = asyncio.run(twice())
    finally:
        asyncio.run(backend.aclose())
    assert all(texts) and not any(t.startswith("**Environment") for t in texts)  # free, so garbage
    [warning] = [r.getMessage() for r in caplog.records]
    assert "odd_tool" in warning and "unconstrained" in warning
