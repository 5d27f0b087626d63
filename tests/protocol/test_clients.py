"""What the clients people use ask of a server (issue 32, item 7), in-process through the SDK's Client: llama-index
lists resource templates, smolagents reads `inputSchema.properties`, mcp-use sends null for every optional argument
it leaves out. The real clients' runs: bench/results/clients_*.log (bench/clients.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from mcp import Client

from aw_mcp.protocol.server import WorldApp, build_server
from aw_mcp.sim.world_setup import WorldOptions, setup_world

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def world(name: str) -> AsyncIterator[tuple[Client, object]]:
    setup = setup_world(WorldOptions(world=name, backend="demo"))
    async with Client(build_server(WorldApp(setup.simulator, setup.spec_text))) as client:
        yield client, setup.simulator


async def test_resource_templates_are_listed_empty_beside_the_resources() -> None:
    async with world("mcp_crm") as (client, _):
        templates = await client.list_resource_templates()  # -32601 (method not found) before
        resources = await client.list_resources()
    assert templates.resource_templates == []
    assert "world://spec" in [str(r.uri) for r in resources.resources]


async def test_every_input_schema_carries_properties() -> None:
    async with world("faults_payments") as (client, _):
        tools = (await client.list_tools()).tools
    bare = next(
        t for t in tools if t.name == "get_payout_schedule"
    )  # `{type: object, additionalProperties: false}`
    assert bare.input_schema["properties"] == {} and bare.input_schema["additionalProperties"] is False
    assert all("properties" in t.input_schema for t in tools)


async def test_null_for_an_optional_argument_without_a_null_type_is_absent() -> None:
    async with world("mcp_crm") as (client, simulator):
        left_out = await client.call_tool(
            "search_contacts", {"query": "murphy", "limit": None, "cursor": None}
        )
        required_null = await client.call_tool("search_contacts", {"query": None})
        wrong_type = await client.call_tool("search_contacts", {"query": "murphy", "limit": "ten"})
        records = simulator.registry.get(None).records
    assert left_out.is_error is False
    assert records[0].arguments == {"query": "murphy"}  # recorded (and shown to the model) as left out
    assert required_null.is_error is True and "None is not of type 'string'" in required_null.content[0].text
    assert wrong_type.is_error is True and "limit" in wrong_type.content[0].text  # other checks unchanged


NULLABLE = """\
name: nulls
description: null arguments
domain: mcp
tools:
  - name: note
    description: Write a note.
    inputSchema:
      type: object
      $defs:
        level: {enum: [low, high]}
      properties:
        text: {type: string}
        author: {type: [string, "null"]}
        level: {$ref: "#/$defs/level"}
        meta: {type: object, properties: {tag: {type: string}}}
      required: [text]
"""


def test_null_stays_where_the_schema_admits_it_or_the_argument_is_required() -> None:
    from aw_mcp.load.world import load_world_text

    tool = load_world_text(NULLABLE, "nulls.yaml").tools[0]
    sent = {"text": None, "author": None, "level": None, "meta": {"tag": None}}
    # `level` refuses null through its $ref: left out; `author` admits it; `text` is required; nested: unchanged
    assert tool.without_refused_nulls(sent) == {"text": None, "author": None, "meta": {"tag": None}}
    problems = tool.argument_problems(tool.without_refused_nulls(sent))
    assert any("text" in p for p in problems) and any("meta.tag" in p for p in problems)
