"""The whole stack without vLLM: agent → `aw-mcp serve --backend openai` → `aw-mcp engine serve` → our engine."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters

pytest.importorskip("torch", reason="needs the [engine] extra")

from engine.testing.tiny_checkpoint import make_tiny_checkpoint  # noqa: E402
from tests.conftest import REPO, free_port, last_call, serving

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # a subprocess engine serving the tiny model


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    checkpoint = make_tiny_checkpoint(tmp_path_factory.mktemp("stack"), seed=5, max_position_embeddings=32768)
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    command = [
        sys.executable,
        "-m",
        "aw_mcp",
        "engine",
        "serve",
        "--model",
        str(checkpoint),
        "--device",
        "cpu",
    ]
    command += ["--port", str(port), "--served-model-name", "tiny-world"]
    with serving(command, healthy, cwd=str(REPO), stdout=subprocess.DEVNULL):
        yield f"{url}/v1"


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
    line = last_call(record)
    assert line["error"] is None, line["error"]
    assert isinstance(line["raw"], str)  # the engine server answered through the OpenAI-compatible API
    assert result.content[0].text
    assert progress == sorted(progress)
