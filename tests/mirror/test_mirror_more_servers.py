"""aw-mcp mirror in front of more real servers: server-everything (npm; many content kinds), mcp-server-time and
mcp-server-git (PyPI, on a temporary repository): every answer equal to a direct client's, every call recorded."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from aw_mcp.trajectory.records import read_trajectory
from tests.mirror.test_mirror_real_servers import direct, mirror, run_calls
from tests.mirror.upstreams import upstream

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def check_same(command: list[str], calls: list[tuple[str, dict[str, Any]]], record: Path) -> list[Any]:
    real = await run_calls(direct(command), calls)
    mirrored = await run_calls(mirror(command, "--record", str(record)), calls)
    assert mirrored == real
    recorded = list(read_trajectory(record))
    assert [(c.tool, c.arguments) for c in recorded] == calls
    assert {c.answered_by for c in recorded} == {"upstream"}
    return real


async def test_mirror_of_server_everything(tmp_path: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("echo", {"message": "hello"}),
        ("get-sum", {"a": 2, "b": 40}),
        ("get-tiny-image", {}),  # an image block: passed through as the server sent it
    ]
    real = await check_same([upstream("mcp-server-everything"), "stdio"], calls, tmp_path / "run.jsonl")
    assert any(block["type"] == "image" for block in real[2]["content"])


async def test_mirror_of_mcp_server_time(tmp_path: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        (
            "convert_time",
            {"source_timezone": "Europe/Paris", "time": "14:30", "target_timezone": "Asia/Tokyo"},
        ),
        (
            "convert_time",
            {"source_timezone": "Mars/Base", "time": "14:30", "target_timezone": "UTC"},
        ),  # an error
    ]
    real = await check_same(
        [upstream("mcp-server-time"), "--local-timezone", "UTC"], calls, tmp_path / "run.jsonl"
    )
    assert real[1]["is_error"] and not real[0]["is_error"]


async def test_mirror_of_mcp_server_git_on_a_temporary_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    (repo / "a.txt").write_text("two\n")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("git_status", {"repo_path": str(repo)}),
        ("git_diff_unstaged", {"repo_path": str(repo)}),
        ("git_log", {"repo_path": str(repo), "max_count": 1}),
    ]
    command = [upstream("mcp-server-git"), "--repository", str(repo)]
    real = await check_same(command, calls, tmp_path / "run.jsonl")
    assert "two" in real[1]["content"][0]["text"]


async def test_the_mirror_lists_and_forwards_the_upstreams_resources_and_prompts() -> None:
    from mcp import Client

    command = [upstream("mcp-server-everything"), "stdio"]

    async def surface(params: Any) -> dict[str, Any]:
        async with Client(params, mode="legacy") as client:
            resources = (await client.list_resources()).resources
            prompts = (await client.list_prompts()).prompts
            first = next(r for r in resources if not str(r.uri).startswith("world://"))
            read = await client.read_resource(str(first.uri))
            prompt = await client.get_prompt(prompts[0].name, {} if not prompts[0].arguments else None)
            return {
                "resources": sorted(str(r.uri) for r in resources if not str(r.uri).startswith("world://")),
                "prompts": [p.name for p in prompts],
                "read": read.model_dump(mode="json"),
                "prompt": prompt.model_dump(mode="json"),
            }

    real = await surface(direct(command))
    mirrored = await surface(mirror(command))
    assert real["resources"] and real["prompts"]
    assert mirrored == real
