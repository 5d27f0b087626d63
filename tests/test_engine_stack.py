"""The whole stack without vLLM: agent → `aw-mcp serve --backend openai` → `aw-mcp engine serve` → our engine."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters

from engine.testing.tiny_checkpoint import make_tiny_checkpoint
from tests.conftest import REPO

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    checkpoint = make_tiny_checkpoint(tmp_path_factory.mktemp("stack"), seed=5, max_position_embeddings=32768)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aw_mcp",
            "engine",
            "serve",
            "--model",
            str(checkpoint),
            "--device",
            "cpu",
            "--port",
            str(port),
            "--served-model-name",
            "tiny-world",
        ],
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "engine server did not come up"
            time.sleep(0.2)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def test_mcp_call_answered_by_our_engine_server(
    engine_url: str, small_world_path: Path, tmp_path: Path
):
    models = httpx.get(f"{engine_url}/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["tiny-world"]
    record = tmp_path / "stack.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "aw_mcp",
            "serve",
            "--world",
            str(small_world_path),
            "--base-url",
            engine_url,
            "--model",
            "tiny-world",
            "--max-tokens",
            "16",
            "--no-thinking",
            "--record",
            str(record),
        ],
        cwd=str(REPO),
    )
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(params) as client:
        result = await client.call_tool(
            "cancel_order", {"order_id": "ORD-1001"}, read_timeout_seconds=240, progress_callback=on_progress
        )
    line = json.loads(record.read_text().splitlines()[-1])
    assert line["error"] is None, line["error"]
    assert isinstance(line["raw"], str)  # the engine server answered through the OpenAI-compatible API
    assert result.content[0].text
    assert progress == sorted(progress)
