"""`aw-mcp import mcp` against a live server (our own `aw-mcp serve`, over stdio and streamable HTTP) and
`aw-mcp import tools-list` from saved files."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mcp.types as types
import pytest

from aw_mcp.cli import main
from aw_mcp.importers.mcp_catalog import list_all_tools
from aw_mcp.load.world import load_world, load_world_text, validate_paths
from tests.conftest import REPO, SMALL_WORLD, listening, serving
from tests.fake_openai import Reply, ScriptedOpenAIServer

ORDER = {"id": "ORD-1001", "status": "shipped", "total": 99.0}


def answers(body: dict, call_number: int) -> Reply:
    assert '"get_order"' in body["messages"][-1]["content"], "only the read-only tool may be called"
    return Reply(content=f"**Environment Observation:**\n{json.dumps(ORDER)}")


@pytest.fixture
def backend() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(answers) as server:
        yield server


def serve_command(world: Path, backend: ScriptedOpenAIServer, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "aw_mcp", "serve", "--world", str(world),
        "--backend", "openai", "--base-url", backend.base_url, "--model", "m", *extra,
    ]  # fmt: skip


@pytest.mark.slow  # an `aw-mcp serve` subprocess
def test_import_live_stdio_server_with_read_only_samples(
    small_world_path: Path, backend: ScriptedOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = tmp_path / "samples.json"
    samples.write_text(
        json.dumps(
            {
                "get_order": [{"order_id": "ORD-1001"}],
                "cancel_order": [{"order_id": "ORD-1001"}],  # destructive: must not be called
                "no_such_tool": [{}],
            }
        )
    )
    out = tmp_path / "snapshot.yaml"
    command = serve_command(small_world_path, backend)
    assert main(["import", "mcp", "-o", str(out), "--sample", str(samples), "--", *command]) == 0
    stderr = capsys.readouterr().err
    assert validate_paths([out]) == []
    original = load_world_text(SMALL_WORLD)
    world = load_world(out)
    assert world.name == "aw-mcp-tiny-shop" and "tiny-shop" in world.description
    assert [t.name for t in world.tools] == ["get_order", "cancel_order"]
    for ours, theirs in zip(world.tools, original.tools, strict=True):
        assert ours.inputSchema == theirs.inputSchema and ours.outputSchema == theirs.outputSchema
        assert ours.annotations == theirs.annotations and ours.title == theirs.title
    get_order = world.tools[0]
    assert [e.model_dump() for e in get_order.examples] == [
        {"arguments": {"order_id": "ORD-1001"}, "result": ORDER}
    ]
    assert world.tools[1].examples == []
    assert len(backend.requests) == 1  # only get_order reached the world model
    assert "--sample cancel_order: not called: the tool is not marked read-only" in stderr
    assert "--sample no_such_tool: the server has no tool of this name" in stderr


@pytest.mark.slow  # an `aw-mcp serve` subprocess
def test_import_live_http_server(
    small_world_path: Path, backend: ScriptedOpenAIServer, tmp_path: Path, port: int
) -> None:
    command = serve_command(small_world_path, backend, "--transport", "http", "--port", str(port))
    out = tmp_path / "http.yaml"
    with serving(command, lambda: listening(port), cwd=REPO, stdout=subprocess.DEVNULL):
        assert main(["import", "mcp", "--url", f"http://127.0.0.1:{port}/mcp", "-o", str(out)]) == 0
    assert [t.name for t in load_world(out).tools] == ["get_order", "cancel_order"]


def test_unreachable_server_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.yaml"
    code = main(["import", "mcp", "-o", str(out), "--timeout", "5", "--", sys.executable, "-c", "import sys"])
    stderr = capsys.readouterr().err
    assert code == 1 and "could not import from MCP server" in stderr and "Traceback" not in stderr
    assert not out.exists()
    assert main(["import", "mcp", "-o", str(out)]) == 2  # a usage error, as argparse exits
    assert "give either a server command" in capsys.readouterr().err


CATALOG = [
    {
        "name": "list_files",
        "title": "List files",
        "description": "Files in a folder.",
        "inputSchema": {"properties": {"path": {"type": "string"}}, "required": ["path"]},
        "outputSchema": {"type": "array", "items": {"type": "string"}},
        "annotations": {"readOnlyHint": True, "openWorldHint": False, "unknownHint": 3},
        "_meta": {"vendor": "x"},
    },
    {"name": "read file!", "inputSchema": {"type": "object"}},
    {"name": "read_file", "inputSchema": {"type": "object", "properties": {"n": {"type": "strnig"}}}},
    {"name": "list_files", "inputSchema": {"type": "object"}},
    {"description": "a tool without a name"},
    {"name": "stat", "inputSchema": {"type": "object"}, "outputSchema": {"type": 5}},
]


@pytest.mark.parametrize(
    "shape",
    [{"tools": CATALOG}, {"jsonrpc": "2.0", "id": 1, "result": {"tools": CATALOG}}, CATALOG],
    ids=["result", "jsonrpc", "bare-list"],
)
def test_import_saved_tools_list_adapts_or_skips(
    shape: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "fs-server.json"
    saved.write_text(json.dumps(shape))
    out = tmp_path / "fs.yaml"
    assert main(["import", "tools-list", str(saved), "-o", str(out)]) == 0
    stderr = capsys.readouterr().err
    assert validate_paths([out]) == []
    tools = {t.name: t for t in load_world(out).tools}
    assert list(tools) == ["list_files", "read_file_2", "read_file", "list_files_2", "stat"]
    listing = tools["list_files"]
    assert listing.inputSchema["type"] == "object" and listing.outputWrapper == "items"
    assert listing.wrap_result(["a.txt"]) == {"items": ["a.txt"]}
    assert listing.annotations.model_dump(exclude_none=True) == {"readOnlyHint": True, "openWorldHint": False}
    assert tools["read_file"].inputSchema == {"type": "object"}  # invalid schema replaced, with a warning
    assert tools["stat"].outputSchema is None
    for expected in (
        "#/tools/0: outputSchema root is not an object; wrapped under 'items'",
        "#/tools/1: tool name 'read file!' is not a valid unique tool name; imported as 'read_file_2'",
        "#/tools/2: input schema replaced by a free-form object",
        "#/tools/3: tool name 'list_files' is not a valid unique tool name; imported as 'list_files_2'",
        "#/tools/4: a tool needs a string `name`; skipped",
        "#/tools/5: outputSchema is not valid JSON Schema",
    ):
        assert expected in stderr, expected


def test_tools_list_with_nothing_importable_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "empty.json"
    saved.write_text('{"tools": []}')
    assert main(["import", "tools-list", str(saved)]) == 1
    assert "no tool could be imported" in capsys.readouterr().err
    saved.write_text("{not json")
    assert main(["import", "tools-list", str(saved)]) == 1
    assert "is not JSON" in capsys.readouterr().err


class PagedClient:
    """Just enough of `mcp.Client` to serve tools/list in pages of one."""

    def __init__(self, names: list[str]):
        self.names = names
        self.cursors: list[str | None] = []

    async def list_tools(self, cursor: str | None = None) -> types.ListToolsResult:
        self.cursors.append(cursor)
        index = int(cursor or 0)
        tool = types.Tool(name=self.names[index], input_schema={"type": "object"})
        more = index + 1 < len(self.names)
        return types.ListToolsResult(tools=[tool], next_cursor=str(index + 1) if more else None)


@pytest.mark.anyio
async def test_tools_list_is_paged_to_the_end() -> None:
    client = PagedClient(["a", "b", "c"])
    tools = await list_all_tools(client)
    assert [t["name"] for t in tools] == ["a", "b", "c"] and client.cursors == [None, "1", "2"]
    assert tools[0]["inputSchema"] == {"type": "object"}  # wire (camelCase) names, as a world file uses


def test_dangling_refs_are_caught_at_import_not_at_call_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = {
        "name": "lookup",
        "inputSchema": {"type": "object", "properties": {"q": {"$ref": "#/$defs/Query"}}},
        "outputSchema": {"type": "object", "$defs": {"Hit": {"type": "string"}}, "properties": {
            "hits": {"type": "array", "items": {"$ref": "#/$defs/Hit"}}}},
    }  # fmt: skip
    saved = tmp_path / "refs.json"
    saved.write_text(json.dumps([tool]))
    out = tmp_path / "refs.yaml"
    assert main(["import", "tools-list", str(saved), "-o", str(out)]) == 0
    assert "inputSchema: $ref '#/$defs/Query' points at nothing" in capsys.readouterr().err
    imported = load_world(out).tools[0]
    assert imported.inputSchema == {"type": "object"}
    assert imported.outputSchema == tool["outputSchema"]  # its own $defs resolve, so it is kept as is
