"""Constrained observations without a model: the answer schema a structured tool is decoded under (its result OR an
error), keywords the grammar cannot take relaxed with a load-time warning, `model.constrained`, and the openai
backend's `response_format` with its learnt fallback, through `aw-mcp serve` and a real MCP client."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from aw_mcp.backends.openai import OpenAIWorldModel, schema_name
from aw_mcp.backends.openai_dialects import Dialect
from aw_mcp.core.model_io import GenerationParams
from aw_mcp.load.world import load_world, load_world_text, validate_paths
from aw_mcp.prompt.constraint import ERROR_BODY_SCHEMA, constraint_for, relax, tool_grammar
from aw_mcp.sim.simulator import Simulator, looks_like_error
from tests.conftest import REPO, ScriptedWorldModel, observation
from tests.fake_openai import Reply, ScriptedOpenAIServer

ITEM = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "status": {"enum": ["open", "closed"]}},
    "required": ["id", "status"],
}
WORLD = f"""\
name: tasks
now: "2026-03-01T09:00:00Z"
tools:
  - name: list_tasks
    description: The tasks of a project (the API returns a JSON array).
    inputSchema: {{type: object, properties: {{project: {{type: string}}}}, required: [project]}}
    outputSchema:
      type: object
      properties:
        items: {{type: array, items: {json.dumps(ITEM)}}}
      required: [items]
    outputWrapper: items
  - name: get_task
    description: One task.
    inputSchema: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
    outputSchema: {json.dumps(ITEM)}
  - name: ping
    description: Plain text.
"""
LISTED = [{"id": "t1", "status": "open"}]


def write_world(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "tasks.yaml"
    path.write_text(WORLD + extra, encoding="utf-8")
    return path


# --- the answer schema --------------------------------------------------------------------------------------------


def test_answer_schema_is_the_unwrapped_result_or_the_error_body(tmp_path: Path) -> None:
    world = load_world(write_world(tmp_path))
    listed = constraint_for(world.tool("list_tasks"), "mcp")
    assert listed is not None and listed.name == "list_tasks"
    assert listed.json_schema == {"anyOf": [{"type": "array", "items": ITEM}, ERROR_BODY_SCHEMA]}
    assert listed.prefix == "**Environment Observation:**\n" and listed.suffix == ""
    assert listed.text_alternative is not None and listed.text_alternative.startswith("Error: ")
    assert constraint_for(world.tool("ping"), "mcp") is None
    web = constraint_for(world.tool("get_task"), "web")
    assert web is not None and (web.prefix, web.suffix) == (
        "<predicted_observation>\n",
        "\n</predicted_observation>",
    )
    # Whatever the error branch admits, the simulator recognises as an error.
    validator = jsonschema.Draft202012Validator(listed.json_schema)
    for body in ({"error": {"status": 404, "code": "NOT_FOUND", "message": "no project"}}, {"error": "gone"}):
        assert validator.is_valid(body)
        assert looks_like_error(json.dumps(body)) and looks_like_error(json.dumps(body, indent=2))
    assert not validator.is_valid({"error": {"code": "X"}}) and not validator.is_valid([{"id": "t1"}])


def test_wrapped_definitions_are_hoisted_to_the_root() -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Task"}}},
        "$defs": {"Task": ITEM},
    }
    grammar = tool_grammar(schema, "items")
    assert grammar.schema["$defs"] == {"Task": ITEM}
    assert grammar.schema["anyOf"][0] == {"type": "array", "items": {"$ref": "#/$defs/Task"}}
    assert jsonschema.Draft202012Validator(grammar.schema).is_valid([{"id": "a", "status": "open"}])
    assert not jsonschema.Draft202012Validator(grammar.schema).is_valid([{"id": "a"}])


def test_relax_names_each_keyword_and_keeps_the_rest() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {
                "type": "object",
                "patternProperties": {"^x-": {"type": "string"}},
                "additionalProperties": False,
            },
            "code": {"type": "string", "pattern": "^(a)\\1$"},
            "word": {"type": "string", "pattern": "^\\p{L}+$"},
            "ref": {"type": "string", "pattern": "^[A-Z]{3}$", "format": "idn-email"},
            "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]},
            "gone": False,
            "both": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
                ]
            },
        },
        "required": ["code"],
        "not": {"required": ["gone"]},
    }
    relaxed, notes = relax(schema)
    named = {(n.keyword, "/".join(map(str, n.pointer))) for n in notes}
    assert named == {
        ("patternProperties", "properties/tags/patternProperties"),
        ("pattern", "properties/code/pattern"),
        ("pattern", "properties/word/pattern"),
        ("format", "properties/ref/format"),
        ("uniqueItems", "properties/ids/uniqueItems"),
        ("oneOf", "properties/kind/oneOf"),
        ("false", "properties/gone"),
        ("not", "not"),
    }
    props = relaxed["properties"]
    assert props["tags"] == {"type": "object", "additionalProperties": {"anyOf": [{"type": "string"}]}}
    assert props["ref"] == {"type": "string", "pattern": "^[A-Z]{3}$"}  # a regex the grammar takes stays
    assert props["kind"] == {"anyOf": [{"const": "a"}, {"const": "b"}]}
    assert props["both"] == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }  # a mergeable allOf is merged, not relaxed
    assert "gone" not in props and "not" not in relaxed and relaxed["required"] == ["code"]
    assert (
        schema["properties"]["ids"]["uniqueItems"] is True
    )  # the original is untouched (post-hoc validation)


def test_an_unsupported_keyword_loads_with_a_warning_naming_file_tool_and_keyword(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    extra = """\
  - name: tag_task
    description: Tags of a task.
    outputSchema:
      type: object
      properties:
        tags: {type: object, patternProperties: {"^x-": {type: string}}}
"""
    path = write_world(tmp_path, extra)
    with caplog.at_level(logging.WARNING, logger="aw_mcp.spec.world"):
        world = load_world(path)  # loads: a warning, never a crash
    assert world.tool("tag_task") is not None
    [message] = [r.getMessage() for r in caplog.records]
    assert str(path) in message and "tool tag_task" in message and "`patternProperties`" in message
    assert (
        "#/properties/tags/patternProperties" in message
        and "validated against the full outputSchema" in message
    )
    [issue] = validate_paths([path])  # `aw-mcp validate` lists it as a warning, on the keyword's line
    line = (WORLD + extra).splitlines().index(
        '        tags: {type: object, patternProperties: {"^x-": {type: string}}}'
    ) + 1
    assert issue.severity == "warning" and issue.line == line and "patternProperties" in issue.message
    caplog.clear()
    unconstrained = path.read_text() + "model: {constrained: false}\n"
    with caplog.at_level(logging.WARNING, logger="aw_mcp.spec.world"):
        load_world_text(unconstrained, str(path))
    assert validate_paths([path]) and not caplog.records
    path.write_text(unconstrained)
    assert validate_paths([path]) == []  # nothing is relaxed when nothing is constrained


def test_model_constrained_is_a_strict_boolean(tmp_path: Path) -> None:
    from aw_mcp.spec.issues import WorldSpecError

    with pytest.raises(WorldSpecError, match=r"model\.constrained"):
        load_world_text(WORLD + "model: {constrained: 'yes'}\n", "w.yaml")


# --- the simulator asks for it ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_simulator_sends_the_constraint_unless_switched_off(tmp_path: Path) -> None:
    for constrained in (True, False):
        text = WORLD + f"model: {{constrained: {str(constrained).lower()}}}\n"
        world = load_world_text(text, "tasks.yaml")
        model = ScriptedWorldModel([observation(json.dumps(LISTED)), observation("pong")])
        sim = Simulator(world, model)
        listed = await sim.call("list_tasks", {"project": "web"})
        assert listed.structured == {"items": LISTED} and not listed.is_error
        await sim.call("ping", {})
        params: list[GenerationParams] = [c["params"] for c in model.calls]
        assert params[1].constraint is None  # a text tool is never constrained
        if constrained:
            assert params[0].constraint == constraint_for(world.tool("list_tasks"), "mcp")
        else:
            assert params[0].constraint is None


@pytest.mark.anyio
async def test_a_constrained_error_observation_is_an_error_result() -> None:
    world = load_world_text(WORLD, "tasks.yaml")
    body = {"error": {"status": 404, "code": "NOT_FOUND", "message": "No project web"}}
    model = ScriptedWorldModel(
        [observation(json.dumps(body, indent=2)), observation("Error: 403 Forbidden - no")]
    )
    sim = Simulator(world, model)
    for _ in range(2):
        outcome = await sim.call("get_task", {"id": "t1"})
        assert outcome.is_error and outcome.record is not None and outcome.record.attempts == 1


# --- the openai backend -------------------------------------------------------------------------------------------


def params_for(tool: str = "list_tasks") -> GenerationParams:
    world = load_world_text(WORLD, "tasks.yaml")
    return GenerationParams(constraint=constraint_for(world.tool(tool), "mcp"))


async def ask(backend: OpenAIWorldModel, params: GenerationParams) -> str:
    return (await backend.generate([{"role": "user", "content": "x"}], params)).text


def test_schema_names_are_what_servers_accept() -> None:
    assert schema_name("tasks.list v2") == "tasks_list_v2"
    assert schema_name("x" * 100) == "x" * 64


def schema_alone(backend: OpenAIWorldModel) -> OpenAIWorldModel:
    """A backend whose server takes the JSON Schema alone, as a known server does once it refused the grammar
    (an unidentified server gets no constraint at all: tests/backends/test_backend_openai.py)."""
    backend.dialect = Dialect("a server taking the JSON Schema alone")
    return backend


@pytest.mark.anyio
async def test_response_format_is_sent_as_vllm_and_sglang_take_it() -> None:
    with ScriptedOpenAIServer([Reply(content="[]")]) as server:
        backend = schema_alone(OpenAIWorldModel(server.base_url, "m", retries=0))
        await ask(backend, params_for())
        await ask(backend, GenerationParams())
    constrained, free = (r.body for r in server.requests)
    assert constrained["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "list_tasks", "schema": params_for().constraint.json_schema, "strict": True},
    }
    assert "response_format" not in free
    assert backend.response_format_supported is True


@pytest.mark.anyio
@pytest.mark.parametrize(
    "message",
    ["response_format json_schema is not supported by this server", "Unknown field in request body"],
)
async def test_a_refused_response_format_falls_back_once_and_for_good(
    message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Named in the error or not: on the first constrained request, a 400 that goes away without the constraint
    means the server does not take it."""
    with ScriptedOpenAIServer([Reply(content="[]")], reject_response_format=message) as server:
        backend = schema_alone(OpenAIWorldModel(server.base_url, "m", retries=0))
        with caplog.at_level(logging.WARNING, logger="aw_mcp.backends.openai"):
            for _ in range(3):
                assert await ask(backend, params_for()) == "[]"
    sent = ["response_format" in r.body for r in server.requests]
    assert sent == [True, False, False, False]
    assert backend.response_format_supported is False
    [warning] = [r.getMessage() for r in caplog.records]
    assert "does not accept response_format" in warning and message in warning


@pytest.mark.anyio
async def test_a_400_that_stays_without_the_constraint_is_reported_and_blames_nothing() -> None:
    with ScriptedOpenAIServer(
        [Reply(status=400, body='{"error": {"message": "prompt too long"}}')]
    ) as server:
        backend = schema_alone(OpenAIWorldModel(server.base_url, "m", retries=0))
        with pytest.raises(Exception, match="prompt too long"):
            await ask(backend, params_for())
    assert ["response_format" in r.body for r in server.requests] == [True, False]
    assert backend.response_format_supported is None  # still unknown: the next call sends it again


@pytest.mark.anyio
async def test_after_support_is_known_an_unnamed_400_is_not_blamed_on_the_schema() -> None:
    replies = [Reply(content="[]"), Reply(status=400, body='{"error": {"message": "bad seed"}}')]
    with ScriptedOpenAIServer(replies) as server:
        backend = schema_alone(OpenAIWorldModel(server.base_url, "m", retries=0))
        await ask(backend, params_for())
        with pytest.raises(Exception, match="bad seed"):
            await ask(backend, params_for())
    assert ["response_format" in r.body for r in server.requests] == [True, True]  # no resend


@pytest.mark.anyio
async def test_after_support_is_known_a_refused_schema_is_dropped_for_that_tool_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def script(body: dict[str, Any], n: int) -> Reply:
        rf = body.get("response_format")
        if rf and rf["json_schema"]["name"] == "get_task":
            return Reply(status=400, body='{"error": {"message": "grammar: cannot compile json_schema"}}')
        return Reply(content="{}")

    with ScriptedOpenAIServer(script) as server:
        backend = schema_alone(OpenAIWorldModel(server.base_url, "m", retries=0))
        with caplog.at_level(logging.WARNING, logger="aw_mcp.backends.openai"):
            await ask(backend, params_for("list_tasks"))
            for _ in range(2):
                await ask(backend, params_for("get_task"))
            await ask(backend, params_for("list_tasks"))
    names = [
        (r.body.get("response_format") or {}).get("json_schema", {}).get("name") for r in server.requests
    ]
    assert names == ["list_tasks", "get_task", None, None, "list_tasks"]
    assert backend.response_format_supported is True
    [warning] = [r.getMessage() for r in caplog.records]
    assert "get_task" in warning


# --- end to end: aw-mcp serve with a real MCP client --------------------------------------------------------------


# vLLM that refuses the framed grammar: its structured tools get the JSON Schema alone.
VLLM_WITHOUT_GRAMMAR = {
    "model_card": {"owned_by": "vllm"},
    "version": "0.11.0",
    "refuse": {
        "structured_outputs": Reply(status=400, body='{"error": {"message": "structured_outputs: no"}}')
    },
}


async def serve_and_call(world: Path, server: ScriptedOpenAIServer, stderr: Path, calls: int) -> list[Any]:
    args = ["-m", "aw_mcp", "serve", "--world", str(world), "--base-url", server.base_url, "--model", "m"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))
    results = []
    with stderr.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            for _ in range(calls):
                results.append(await client.call_tool("list_tasks", {"project": "web"}))
    return results


def answer(body: dict[str, Any], n: int) -> Reply:
    return Reply(content=json.dumps(LISTED), reasoning="The project has one open task.")


@pytest.mark.anyio
async def test_serve_sends_the_unwrapped_output_schema_as_response_format(tmp_path: Path) -> None:
    world = write_world(tmp_path)
    with ScriptedOpenAIServer(answer, **VLLM_WITHOUT_GRAMMAR) as server:
        [result] = await serve_and_call(world, server, tmp_path / "stderr.txt", 1)
    assert result.is_error is False and result.structured_content == {"items": LISTED}
    refused, request = server.requests
    assert "structured_outputs" in refused.body and "response_format" not in refused.body
    response_format = request.body["response_format"]
    assert response_format["type"] == "json_schema" and response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["name"] == "list_tasks"
    result_schema, error_schema = response_format["json_schema"]["schema"]["anyOf"]
    # The tool's outputSchema with the wrapper unwrapped: the `items` property's schema, exactly.
    assert result_schema == load_world(world).tool("list_tasks").outputSchema["properties"]["items"]
    assert result_schema == {"type": "array", "items": ITEM}
    assert error_schema == ERROR_BODY_SCHEMA


@pytest.mark.anyio
async def test_serve_falls_back_when_the_server_refuses_response_format(tmp_path: Path) -> None:
    world = write_world(tmp_path)
    refusal = "1 validation error: response_format: structured outputs are not enabled on this server"
    with ScriptedOpenAIServer(answer, reject_response_format=refusal, **VLLM_WITHOUT_GRAMMAR) as server:
        results = await serve_and_call(world, server, tmp_path / "stderr.txt", 3)
    assert all(r.is_error is False and r.structured_content == {"items": LISTED} for r in results)
    assert ["response_format" in r.body for r in server.requests] == [False, True, False, False, False]
    stderr = (tmp_path / "stderr.txt").read_text()
    assert stderr.count("does not accept response_format") == 1, stderr


@pytest.mark.anyio
async def test_serve_sends_no_response_format_when_constrained_is_off(tmp_path: Path) -> None:
    world = write_world(tmp_path, "model: {constrained: false}\n")
    with ScriptedOpenAIServer(answer) as server:
        [result] = await serve_and_call(world, server, tmp_path / "stderr.txt", 1)
    assert result.structured_content == {"items": LISTED}
    assert "response_format" not in server.requests[0].body
