"""aw-mcp mirror in front of the real reference servers, driven by the mcp SDK's client: every answer is the one
the upstream gives a direct client, every call is recorded as answered by the upstream."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from aw_mcp.trajectory.records import read_trajectory
from tests.mirror.upstreams import upstream

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def mirror(
    upstream_command: list[str], *flags: str, env: dict[str, str] | None = None
) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "aw_mcp", "mirror", *flags, "--", *upstream_command],
        env={**os.environ, **(env or {})},
    )


def direct(upstream_command: list[str], env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=upstream_command[0], args=upstream_command[1:], env={**os.environ, **(env or {})}
    )


def seen(result: Any) -> dict[str, Any]:
    """What a client sees of a result: content blocks, structured content, isError."""
    return {
        "content": [block.model_dump(mode="json", exclude_none=True) for block in result.content],
        "structured": result.structured_content,
        "is_error": bool(result.is_error),
    }


async def run_calls(
    params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    async with Client(params, mode="legacy") as client:
        return [seen(await client.call_tool(name, arguments)) for name, arguments in calls]


MEMORY_CALLS: list[tuple[str, dict[str, Any]]] = [
    (
        "create_entities",
        {"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote notes"]}]},
    ),
    ("create_entities", {"entities": [{"name": "Engine", "entityType": "machine", "observations": []}]}),
    ("create_relations", {"relations": [{"from": "Ada", "to": "Engine", "relationType": "programmed"}]}),
    ("add_observations", {"observations": [{"entityName": "Ada", "contents": ["born 1815"]}]}),
    ("add_observations", {"observations": [{"entityName": "Nobody", "contents": ["x"]}]}),  # an error
    ("search_nodes", {"query": "1815"}),
    ("delete_entities", {"entityNames": ["Engine"]}),
    ("open_nodes", {"names": ["Ada", "Engine"]}),
    ("read_graph", {}),
]


async def test_mirror_of_server_memory_answers_as_the_server_does_and_records_every_call(
    tmp_path: Path,
) -> None:
    memory = [upstream("mcp-server-memory")]
    real = await run_calls(direct(memory, {"MEMORY_FILE_PATH": str(tmp_path / "direct.jsonl")}), MEMORY_CALLS)
    record = tmp_path / "run.jsonl"
    mirrored = await run_calls(
        mirror(memory, "--record", str(record), env={"MEMORY_FILE_PATH": str(tmp_path / "mirror.jsonl")}),
        MEMORY_CALLS,
    )
    assert mirrored == real
    assert [r["is_error"] for r in real].count(True) == 1  # the unknown entity: the server's own error
    calls = list(read_trajectory(record))
    assert [(c.tool, c.arguments) for c in calls] == MEMORY_CALLS
    for call, answer in zip(calls, real, strict=True):
        assert call.answered_by == "upstream" and call.notice is None
        assert call.observation == "\n".join(block["text"] for block in answer["content"])
        assert call.is_error == answer["is_error"] and call.latency_ms > 0
    # the upstream really holds what the agent did through the mirror
    assert "born 1815" in (tmp_path / "mirror.jsonl").read_text()


async def test_mirror_of_server_filesystem_reads_and_writes_the_real_folder(tmp_path: Path) -> None:
    folder = tmp_path / "files"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "a.txt").write_text("alpha\nbeta\n")
    (folder / "b.md").write_text("# title\n")
    filesystem = [upstream("mcp-server-filesystem"), str(folder)]
    reads: list[tuple[str, dict[str, Any]]] = [
        ("list_directory", {"path": str(folder)}),
        ("read_text_file", {"path": str(folder / "docs" / "a.txt")}),
        ("read_text_file", {"path": str(folder / "docs" / "a.txt"), "head": 1}),
        ("search_files", {"path": str(folder), "pattern": "*.txt"}),
        ("read_text_file", {"path": str(tmp_path / "outside.txt")}),  # outside the allowed folder: an error
        ("list_allowed_directories", {}),
    ]
    real = await run_calls(direct(filesystem), reads)
    record = tmp_path / "run.jsonl"
    writes: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": str(folder / "new.txt"), "content": "written through the mirror"}),
        ("list_directory", {"path": str(folder)}),
    ]
    mirrored = await run_calls(mirror(filesystem, "--record", str(record)), reads + writes)
    assert mirrored[: len(reads)] == real
    assert real[4]["is_error"] and not any(r["is_error"] for i, r in enumerate(real) if i != 4)
    assert (folder / "new.txt").read_text() == "written through the mirror"
    assert "new.txt" in json.dumps(mirrored[-1]["content"])
    calls = list(read_trajectory(record))
    assert len(calls) == len(reads) + len(writes) and {c.answered_by for c in calls} == {"upstream"}
