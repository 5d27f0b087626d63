"""An upstream that crashes, hangs or writes garbage mid-call: the agent gets an isError within the deadline, the
call is recorded, and the mirror keeps serving (a crashed upstream is started again for the next call)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from aw_mcp.trajectory.records import read_trajectory

pytestmark = pytest.mark.timeout(120)

RAW = str(Path(__file__).with_name("raw_upstream.py"))
DEADLINE_S = 2.0


@pytest.mark.anyio
async def test_a_crash_a_hang_and_garbage_each_give_is_error_within_the_deadline_and_the_mirror_keeps_serving(
    tmp_path: Path,
) -> None:
    record = tmp_path / "run.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aw_mcp", "mirror", "--record", str(record), "--call-timeout", str(DEADLINE_S),
              "--", sys.executable, RAW],
    )  # fmt: skip
    async with Client(params, mode="legacy") as client:
        first = await client.call_tool("echo", {"text": "one"})
        assert not first.is_error and first.content[0].text.startswith("echo one")
        pid = first.content[0].text.split("pid ")[1]
        outcomes = {}
        for tool in ("crash", "hang", "garbage"):
            started = time.monotonic()
            with anyio.fail_after(DEADLINE_S * 10):  # never a hang (10x margin: no timing assertion)
                result = await client.call_tool(tool, {})
            outcomes[tool] = (result, time.monotonic() - started)
            assert result.is_error, tool
            again = await client.call_tool("echo", {"text": tool})  # still serving
            assert not again.is_error and again.content[0].text.startswith(f"echo {tool}")
        crashed = outcomes["crash"][0].content[0].text
        assert "upstream" in crashed
        assert "did not answer tools/call hang within 2 s" in outcomes["hang"][0].content[0].text
        # the crashed upstream was started again: another process answers now
        last = await client.call_tool("echo", {"text": "end"})
        assert last.content[0].text.split("pid ")[1] != pid
    calls = list(read_trajectory(record))
    assert [c.tool for c in calls] == ["echo", "crash", "echo", "hang", "echo", "garbage", "echo", "echo"]
    failed = [c for c in calls if c.tool in ("crash", "hang", "garbage")]
    assert all(c.is_error and c.error and c.answered_by == "upstream" and not c.in_history for c in failed)


def test_an_upstream_that_cannot_start_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from aw_mcp.cli import main

    code = main(["mirror", "--call-timeout", "5", "--", sys.executable, "-c", "import sys; sys.exit(2)"])
    err = capsys.readouterr().err
    assert code == 2 and "could not connect to the upstream" in err and "Traceback" not in err
