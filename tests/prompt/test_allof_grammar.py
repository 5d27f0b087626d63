"""`allOf` in an output schema is enforced by both grammars a tool's answers decode under, or named at load
(issue 32, item 4): the JSON Schema sent to xgrammar (the local engine, vLLM/SGLang's json_schema form) and the
grammar text (vLLM/SGLang EBNF, llama.cpp GBNF). Each case decodes a valid answer and refuses one that breaks a
schema of its allOf, checked by xgrammar's own matcher on both grammars."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aw_mcp.core.model_io import AnswerConstraint
from aw_mcp.prompt.constraint import ANSWER_INDENT, answer_frame, error_text_regex, tool_grammar
from aw_mcp.prompt.grammar_text import framed_grammar

xgrammar = pytest.importorskip("xgrammar", reason="needs the [engine] extra (xgrammar)")
from xgrammar.testing import _is_grammar_accept_string  # noqa: E402

A = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
B = {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}
C = {"type": "object", "properties": {"c": {"type": "null"}}, "required": ["c"]}

# name: (outputSchema, an answer it admits, an answer one of its allOf schemas refuses)
CASES: dict[str, tuple[dict[str, Any], Any, Any]] = {
    "one schema": ({"allOf": [A]}, {"a": 1}, {"b": "x"}),
    "two objects": ({"allOf": [A, B]}, {"a": 1, "b": "x"}, {"a": 1}),
    "in array items (the imported tasks API)": (
        {
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"allOf": [A, B]}}},
            "required": ["items"],
        },
        {"items": [{"a": 1, "b": "x"}]},
        {"items": [{"b": "x"}]},
    ),
    "nested allOf": ({"allOf": [A, {"allOf": [B]}]}, {"a": 1, "b": "x"}, {"a": 1}),
    "beside its siblings": ({**B, "allOf": [A]}, {"b": "x", "a": 1}, {"b": "x"}),
    "an object and an anyOf": ({"allOf": [A, {"anyOf": [B, C]}]}, {"a": 1, "b": "x"}, {"b": "x"}),
}


def answer_text(value: Any) -> str:
    prefix, _ = answer_frame("mcp")
    return prefix + json.dumps(value, indent=ANSWER_INDENT)


def grammars(schema: dict[str, Any]) -> tuple[Any, Any, list[str]]:
    """(xgrammar's grammar of the JSON Schema sent, the grammar text parsed by xgrammar, load-time relaxations)."""
    grammar = tool_grammar(schema, None)
    assert grammar.schema is not None
    prefix, suffix = answer_frame("mcp")
    body = xgrammar.Grammar.from_json_schema(
        json.dumps(grammar.schema), any_whitespace=False, indent=ANSWER_INDENT
    )
    framed = xgrammar.Grammar.concat(xgrammar.Grammar.from_ebnf(f"root ::= {json.dumps(prefix)}"), body)
    constraint = AnswerConstraint(
        name="t",
        json_schema=grammar.schema,
        prefix=prefix,
        suffix=suffix,
        text_alternative=error_text_regex(),
    )
    text = framed_grammar(constraint, ANSWER_INDENT)
    return framed, xgrammar.Grammar.from_ebnf(text.text), [str(r) for r in grammar.relaxations]


@pytest.mark.parametrize("case", list(CASES))
def test_all_of_is_enforced_by_both_grammars(case: str) -> None:
    schema, good, bad = CASES[case]
    from_schema, from_text, relaxed = grammars(schema)
    assert relaxed == []  # enforced: nothing to report at load
    for name, grammar in (("json schema", from_schema), ("grammar text", from_text)):
        assert _is_grammar_accept_string(grammar, answer_text(good)), f"{name} refuses a valid answer"
        assert not _is_grammar_accept_string(grammar, answer_text(bad)), (
            f"{name} decodes an answer allOf refuses"
        )


def test_an_all_of_the_grammar_cannot_merge_is_reported_at_load() -> None:
    from aw_mcp.load.world import load_world_text

    world = load_world_text(
        """\
name: refs
description: allOf over a $ref
domain: mcp
tools:
  - name: get
    description: Get one.
    inputSchema: {type: object, properties: {}}
    outputSchema:
      type: object
      $defs:
        a: {type: object, properties: {a: {type: integer}}, required: [a]}
      allOf:
        - {$ref: "#/$defs/a"}
        - {type: object, properties: {b: {type: string}}, required: [b]}
""",
        "refs.yaml",
    )
    from aw_mcp.prompt.constraint import relaxation_warnings

    [(where, message)] = relaxation_warnings(world.tools[0])
    assert "allOf" in message and "validated against the full outputSchema" in message
