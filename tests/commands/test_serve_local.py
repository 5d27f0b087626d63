"""`aw-mcp serve --backend local` on a tiny random checkpoint: the in-process engine answers an MCP tool call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

pytest.importorskip("torch", reason="needs the [engine] extra")

from engine.testing.tiny_checkpoint import make_tiny_checkpoint  # noqa: E402
from tests.conftest import REPO, SUBPROCESS_S, last_call

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # subprocess servers on the tiny checkpoint


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_local"), seed=3, max_position_embeddings=32768)


async def test_local_backend_answers_a_tool_call_end_to_end(
    tiny_checkpoint: Path, small_world_path: Path, tmp_path: Path
) -> None:
    record = tmp_path / "local.jsonl"
    args = [
        "-m",
        "aw_mcp",
        "serve",
        "--world",
        str(small_world_path),
        "--backend",
        "local",
        "--model",
        str(tiny_checkpoint),
        "--device",
        "cpu",
        "--no-thinking",
        "--max-tokens",
        "12",
        "--record",
        str(record),
    ]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool("cancel_order", {"order_id": "ORD-1001"}, read_timeout_seconds=240)
    assert [t.name for t in tools] == ["get_order", "cancel_order"]
    line = last_call(record)
    # The tiny model is random: what it says is noise, but it is the engine's own output for this prompt.
    assert isinstance(line["raw"], str) and line["messages_hash"]
    assert (
        line["error"] is None
        or "did not produce" in (line["error"] or "")
        or "no valid observation" in line["error"]
    )
    assert result.content[0].text


def test_missing_local_model_stops_serve_at_start_up(small_world_path: Path) -> None:
    args = ["-m", "aw_mcp", "serve", "--world", str(small_world_path), "--backend", "local"]
    proc = subprocess.run(
        [sys.executable, *args, "--model", "/nonexistent/checkpoint"],
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_S,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "'/nonexistent/checkpoint' is neither a checkpoint folder nor a Hugging Face hub id" in proc.stderr


async def test_missing_local_model_without_preflight_is_a_clear_is_error(small_world_path: Path) -> None:
    args = [
        "-m",
        "aw_mcp",
        "serve",
        "--world",
        str(small_world_path),
        "--backend",
        "local",
        "--model",
        "/nonexistent/checkpoint",
        "--no-preflight",
    ]
    async with Client(StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))) as client:
        result = await client.call_tool("cancel_order", {"order_id": "ORD-1"})
    text = result.content[0].text
    assert result.is_error
    assert "/nonexistent/checkpoint" in text and "--base-url" in text and "--backend replay" in text


def test_every_bundled_world_prompt_fits_the_tiny_checkpoint_context() -> None:
    from aw_mcp.load.world import load_world
    from aw_mcp.prompt.render import render_system_prompt
    from aw_mcp.prompt.transcript import build_messages
    from aw_mcp.spec.bundled import bundled_worlds
    from engine.testing.tiny_checkpoint import TINY_TEXT_CONFIG, build_tokenizer

    tokenizer = build_tokenizer()
    for path in bundled_worlds():
        world = load_world(path)
        system = render_system_prompt(world, "2026-03-01T00:00:00Z")
        tool = world.tools[0].name if world.tools else "send_keys"
        text = "".join(m["content"] for m in build_messages(world, system, [], tool, {}))
        assert len(tokenizer.encode(text).ids) + 512 < TINY_TEXT_CONFIG["max_position_embeddings"], path.name


async def test_tiny_checkpoint_serves_the_flagship_crm_world(tmp_path: Path) -> None:
    checkpoint = make_tiny_checkpoint(tmp_path / "tiny", seed=3)  # the default context, no override
    record = tmp_path / "crm.jsonl"
    args = ["-m", "aw_mcp", "serve", "--world", "mcp_crm", "--backend", "local", "--model", str(checkpoint)]
    args += ["--device", "cpu", "--max-model-len", "24576", "--no-thinking", "--max-tokens", "8"]
    args += ["--record", str(record)]
    async with Client(StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))) as client:
        await client.call_tool("list_deals", {"owner_id": "usr_03"}, read_timeout_seconds=280)
    line = last_call(record)
    assert (
        isinstance(line["raw"], str) and line["messages_hash"]
    )  # the engine answered (noise: a random model)
    assert "too long" not in (line["error"] or "") and "context" not in (line["error"] or "")
