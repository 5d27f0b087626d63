"""aw-mcp mirror --upstream-url: a Streamable HTTP upstream that needs a bearer token (here `aw-mcp serve --transport
http --auth-token`, the demo backend's scripted answers): the token and headers go with every request, the answers
are the upstream's, and without the token the mirror says at start that it could not connect."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from aw_mcp.trajectory.records import read_trajectory
from tests.conftest import free_port, listening
from tests.mirror.test_mirror_real_servers import seen

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
TOKEN = "s3cret-token-for-the-upstream"


@pytest.fixture
def http_upstream() -> str:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aw_mcp", "serve", "--world", "mcp_crm", "--backend", "demo", "--transport", "http",
         "--port", str(port), "--auth-token", TOKEN],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            assert proc.poll() is None and time.monotonic() < deadline, "the upstream did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_a_streamable_http_upstream_with_a_bearer_token(http_upstream: str, tmp_path: Path) -> None:
    record = tmp_path / "run.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aw_mcp", "mirror", "--upstream-url", http_upstream, "--bearer", TOKEN,
              "--header", "X-Trace: mirror-test", "--record", str(record)],
        env=dict(os.environ),
    )  # fmt: skip
    async with Client(params, mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        tool = "search_contacts"
        mirrored = [seen(await client.call_tool(tool, arguments)) for arguments in ({"query": "Tom"}, {})]
    import httpx2

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
        _direct(http_upstream, http) as direct,
    ):
        assert [t.name for t in (await direct.list_tools()).tools] == names
        real = [seen(await direct.call_tool(tool, arguments)) for arguments in ({"query": "Tom"}, {})]
    assert mirrored == real  # bad arguments too: the upstream's own answer to them, not the mirror's
    assert real[1]["is_error"] and not real[0]["is_error"]
    calls = list(read_trajectory(record))
    assert [c.answered_by for c in calls] == ["upstream", "upstream"] and calls[0].tool == tool
    assert TOKEN not in record.read_text()


def _direct(url: str, http: object):  # type: ignore[no-untyped-def]
    from contextlib import asynccontextmanager

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    @asynccontextmanager
    async def connect():  # type: ignore[no-untyped-def]
        async with (
            streamable_http_client(url, http_client=http) as (read, write, *_),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            yield s

    return connect()


def test_without_the_token_the_mirror_cannot_connect(
    http_upstream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from aw_mcp.cli import main

    assert main(["mirror", "--upstream-url", http_upstream, "--call-timeout", "10"]) == 2
    assert "could not connect to the upstream" in capsys.readouterr().err
