"""The openai backend against llama-cpp-python's own server (`python -m llama_cpp.server`, 0.3.36) on a tiny random
GGUF model made by llama.cpp (tests/fixtures/gguf): a tool with an outputSchema gets the framed grammar as GBNF
`grammar`, no constrained request is refused, and every answer the grammar closes is valid for the tool's schema.

A random model can still stop before the grammar closes its answer: it runs out of max_tokens inside an unbounded
string, or the server ends the answer on an end token. Those answers are counted and printed (run with `-s`, or
`-rP`), not retried away.

llama_cpp must import, with its server extra (`pip install 'llama-cpp-python[server]'`), in this interpreter or in
the one AW_LLAMA_PYTHON names (e.g. AW_LLAMA_PYTHON=/work/llama/venv/bin/python); otherwise these tests skip."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest

from aw_mcp.backends.openai import GRAMMAR, JSON_SCHEMA, UNCONSTRAINED, OpenAIWorldModel
from aw_mcp.core.model_io import AnswerConstraint, Generation, GenerationParams
from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.constraint import constraint_for
from tests.conftest import REPO, free_port, serving

pytestmark = pytest.mark.slow

LLAMA_PYTHON = "AW_LLAMA_PYTHON"
MODEL = REPO / "tests" / "fixtures" / "gguf" / "small-F32.gguf"
CALLS = 40
MAX_TOKENS = 384
MESSAGES = [
    {"role": "system", "content": "You simulate a task tracker's API."},
    {
        "role": "user",
        "content": '### Turn 1\n**Action:**\n```json\n{"name": "get_task", "arguments": {}}\n```',
    },
]
# Short strings, so that a random model closes most answers within MAX_TOKENS (the error body's are unbounded).
WORLD = """\
name: tasks
tools:
  - name: list_tasks
    description: The tasks of a project.
    inputSchema: {type: object, properties: {project: {type: string}}, required: [project]}
    outputSchema:
      type: object
      properties:
        items:
          type: array
          maxItems: 3
          items:
            type: object
            properties:
              id: {type: string, maxLength: 6}
              done: {type: boolean}
            required: [id, done]
      required: [items]
    outputWrapper: items
  - name: get_task
    description: One task.
    inputSchema: {type: object, properties: {id: {type: string}}, required: [id]}
    outputSchema:
      type: object
      properties:
        id: {type: string, maxLength: 6}
        status: {enum: [open, closed]}
        points: {type: integer, minimum: 0, maximum: 13}
        tags: {type: array, items: {type: string, maxLength: 4}, maxItems: 2}
      required: [id, status]
"""


def llama_python() -> str | None:
    """An interpreter whose llama_cpp has its server: this one, or AW_LLAMA_PYTHON's."""
    candidates = [sys.executable, os.environ.get(LLAMA_PYTHON, "")]
    for python in filter(None, candidates):
        try:
            check = subprocess.run(
                [python, "-c", "import llama_cpp.server.app"], capture_output=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if check.returncode == 0:
            return python
    return None


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """The base URL of llama-cpp-python's server on the F32 fixture."""
    python = llama_python()
    if python is None:
        pytest.skip(
            f"llama_cpp.server does not import here; set {LLAMA_PYTHON} to an interpreter where it does"
        )
    port = free_port()
    command = [python, "-m", "llama_cpp.server", "--model", str(MODEL), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--n_ctx", "2048", "--n_threads", "2", "--verbose", "False"]

    def ready() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    with serving(command, ready, within_s=120, stdout=subprocess.DEVNULL):
        yield f"http://127.0.0.1:{port}/v1"


def constraint(tool: str) -> AnswerConstraint:
    found = constraint_for(load_world_text(WORLD, "tasks.yaml").tool(tool), "mcp")
    assert found is not None
    return found


def backend_for(url: str, **kwargs: Any) -> OpenAIWorldModel:
    return OpenAIWorldModel(url, str(MODEL), timeout_s=300, backoff_s=0.01, **kwargs)


def params(answer: AnswerConstraint, seed: int) -> GenerationParams:
    return GenerationParams(
        temperature=1.0, max_tokens=MAX_TOKENS, seed=seed, thinking=False, constraint=answer
    )


@dataclass
class Tally:
    """How each answer ended."""

    calls: int = 0
    whole: int = 0  # the frame, then a whole JSON value or the Error: line
    valid: int = 0  # whole JSON answers valid for the tool's schema
    error_lines: int = 0  # whole answers on the plain-text Error: line
    cut: int = 0  # finish_reason=length: out of max_tokens before the answer was whole
    unfinished: int = 0  # finish_reason=stop, yet no whole answer (an end token let through, or not JSON)

    def add(self, generation: Generation, answer: AnswerConstraint, framed: bool) -> None:
        self.calls += 1
        whole = whole_answer(generation.text, answer, framed)
        if whole is None:
            if generation.finish_reason == "length":
                self.cut += 1
            else:
                self.unfinished += 1
            return
        self.whole += 1
        kind, value = whole
        if kind == "text":
            self.error_lines += 1
        elif jsonschema.Draft202012Validator(answer.json_schema).is_valid(value):
            self.valid += 1

    @property
    def invalid(self) -> int:
        return self.whole - self.valid - self.error_lines

    def line(self, what: str) -> str:
        return (
            f"llama-cpp-python, {what}: {self.calls} calls; {self.whole} whole answers ({self.valid} schema-valid "
            f"JSON, {self.error_lines} Error: lines, {self.invalid} schema-invalid JSON); {self.cut} cut at "
            f"max_tokens={MAX_TOKENS}; {self.unfinished} ended (finish_reason=stop) without a whole answer"
        )


def whole_answer(text: str, answer: AnswerConstraint, framed: bool) -> tuple[str, Any] | None:
    """("json", value) or ("text", line) when the answer is whole (framed: inside its frame), else None."""
    body = text
    if framed:
        if not (text.startswith(answer.prefix) and text.endswith(answer.suffix)):
            return None
        body = text[len(answer.prefix) : len(text) - len(answer.suffix)]
        if answer.text_alternative and re.fullmatch(answer.text_alternative, body):
            return "text", body
    try:
        return "json", json.loads(body)
    except ValueError:
        return None


@pytest.mark.anyio
async def test_the_framed_grammar_is_taken_and_closes_valid_answers(llama_server: str) -> None:
    backend = backend_for(llama_server)
    tally = Tally()
    try:
        for seed in range(CALLS):
            answer = constraint(("get_task", "list_tasks")[seed % 2])
            generation = await backend.generate(MESSAGES, params(answer, seed))
            # Never refused, never retried.
            assert generation.extra == {"attempts": 1, "constrained_as": GRAMMAR}
            assert generation.text.startswith(answer.prefix[: len(generation.text)])  # the frame comes first
            tally.add(generation, answer, framed=True)
    finally:
        await backend.aclose()
    print("\n" + tally.line("framed grammar as GBNF `grammar`"))
    assert backend.dialect is not None and backend.dialect.grammar_field == ("grammar",)
    assert backend.constraint_support == {GRAMMAR: True, JSON_SCHEMA: None}
    # Every answer the grammar closed is valid; the others are counted above, not hidden behind retries.
    assert tally.invalid == 0 and tally.whole > 0, tally.line("framed grammar")


@pytest.mark.anyio
async def test_its_json_object_form_is_taken_after_a_refused_grammar(llama_server: str) -> None:
    backend = backend_for(llama_server)
    backend.constraint_support[GRAMMAR] = False  # as after the server had refused the grammar
    tally = Tally()
    try:
        for seed in range(CALLS // 4):
            answer = constraint("get_task")
            generation = await backend.generate(MESSAGES, params(answer, seed))
            assert generation.extra == {"attempts": 1, "constrained_as": JSON_SCHEMA}
            tally.add(generation, answer, framed=False)
    finally:
        await backend.aclose()
    # llama-cpp-python writes this grammar itself, from the schema: its figures are shown, not asserted (its strings
    # let raw control characters through, so whole-looking answers may not be JSON, and it ignores integer bounds).
    print("\n" + tally.line("response_format json_object + schema (its own grammar)"))
    assert backend.response_format_supported is True


@pytest.mark.anyio
async def test_the_json_schema_form_it_cannot_parse_is_one_refusal_not_four_failures(
    llama_server: str,
) -> None:
    # As any OpenAI-compatible server: response_format json_schema, which llama-cpp-python 0.3.36 answers with
    # HTTP 500 naming response_format. Before, each such call failed after 4 attempts.
    backend = backend_for(llama_server, dialect="openai")
    try:
        first, second = [
            await backend.generate(MESSAGES, params(constraint("get_task"), seed)) for seed in (1, 2)
        ]
    finally:
        await backend.aclose()
    assert first.extra == {"attempts": 1, "constrained_as": UNCONSTRAINED}
    assert second.extra == {"attempts": 1, "constrained_as": UNCONSTRAINED}
    assert backend.response_format_supported is False


@pytest.mark.anyio
async def test_a_grammar_with_every_construct_compiles_in_llama_cpp(llama_server: str) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "age": {"type": "integer", "minimum": -40, "maximum": 120},
            "price": {"type": "number", "minimum": 0},
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "uuid": {"type": "string", "format": "uuid"},
            "code": {"type": "string", "pattern": '^[A-Z]{3}-\\d+ "q"\\\\$'},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "meta": {"type": "object"},
            "scores": {"type": "object", "additionalProperties": {"type": "number"}},
            "note": {"type": ["string", "null"]},
            "kind": {"const": {"a": [1, 2]}},
            "mood": {"enum": ["ünïcode", "😀", 'quo"te']},
            "tree": {"$ref": "#/$defs/node"},
        },
        "required": ["name"],
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
    }
    tool = load_world_text(WORLD, "tasks.yaml").tool("get_task")
    assert tool is not None
    answer = constraint_for(tool.model_copy(update={"outputSchema": schema}), "web")  # the tagged frame
    backend = backend_for(llama_server)
    try:
        generation = await backend.generate(MESSAGES, params(answer, 0))
    finally:
        await backend.aclose()
    assert generation.extra == {"attempts": 1, "constrained_as": GRAMMAR}
    assert generation.text.startswith("<predicted_observation>\n")
