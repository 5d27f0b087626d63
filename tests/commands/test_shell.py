"""`aw-mcp shell` driven through a pipe against a scripted OpenAI-compatible world model."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from aw_mcp.cli import main
from aw_mcp.commands.shell import LineError, parse_line
from tests.fake_openai import Reply, ScriptedOpenAIServer

SCRIPT = """\
# a comment, then a blank line

tools
get_order {"order_id": "ORD-1001"}
call cancel_order {"order_id": "ORD-1001", "reason": "duplicate"}
nope {}
get_order {"order_id":
get_order [1]
get_order {"order_id": 7}
history
help
quit
get_order {"order_id": "ORD-1001"}
"""


def answers(body: dict, call_number: int) -> Reply:
    action = body["messages"][-1]["content"]
    if '"get_order"' in action:
        return Reply(
            content='**Environment Observation:**\n{"id": "ORD-1001", "status": "shipped", "total": 12.5}'
        )
    return Reply(content="**Environment Observation:**\nOrder ORD-1001 cancelled.")


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def shell(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """`aw-mcp shell ARGS` in-process (main(argv)) with `stdin` piped in: a subprocess would add only its
    start-up. No AW_* variable of the machine's reaches it."""
    for key in [k for k in os.environ if k.startswith("AW_")]:
        monkeypatch.delenv(key)

    def run(*args: str, stdin: str = SCRIPT) -> Ran:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main(["shell", *args])
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


def run_shell(shell: Callable[..., Ran], world: Path, backend: ScriptedOpenAIServer, *flags: str) -> Ran:
    return shell(
        "--world", str(world), "--backend", "openai", "--base-url", backend.base_url, "--model", "m", *flags
    )


def test_shell_piped_human_output(shell: Callable[..., Ran], small_world_path: Path) -> None:
    with ScriptedOpenAIServer(answers) as backend:
        done = run_shell(shell, small_world_path, backend)
    assert done.returncode == 0, done.stderr
    out, err = done.stdout, done.stderr
    assert "get_order(order_id) [read-only, structured]  Get order" in out
    assert "cancel_order(order_id, reason?) [destructive]  Cancel an order." in out
    assert '"status": "shipped"' in out and "Order ORD-1001 cancelled." in out
    assert out.count("[ok, ") == 2 and out.count("[error, ") == 1  # the call with a bad order_id
    assert "Invalid arguments for tool get_order" in out
    assert "line 6: Unknown tool: 'nope'" in err
    assert "line 7: arguments for get_order are not valid JSON" in err
    assert "line 8: arguments for get_order must be a JSON object" in err
    # history is the session's: the two good calls and the rejected one, in order
    history = [line for line in out.splitlines() if line.startswith("#")]
    assert [h.split(" ")[:2] for h in history] == [
        ["#0", "get_order"],
        ["#1", "cancel_order"],
        ["#2", "get_order"],
    ]
    assert "call TOOL {json}" in out  # help
    assert len(backend.requests) == 2  # quit stopped the shell before the last line
    # the second model call saw the first as history, like a real agent session
    assert [m["role"] for m in backend.requests[1].body["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]
    assert "world-model" not in out and ">" not in out.splitlines()[0]  # no prompt noise when piped


def test_shell_json_lines(shell: Callable[..., Ran], small_world_path: Path) -> None:
    with ScriptedOpenAIServer(answers) as backend:
        done = run_shell(shell, small_world_path, backend, "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [t["name"] for t in lines[0]["tools"]] == ["get_order", "cancel_order"]
    first = lines[1]
    assert first["tool"] == "get_order" and first["is_error"] is False
    assert first["structured"] == {"id": "ORD-1001", "status": "shipped", "total": 12.5}
    assert first["latency_ms"] >= 0 and first["faults"] == []
    assert lines[2]["text"] == "Order ORD-1001 cancelled." and lines[2]["structured"] is None
    errors = [line for line in lines if "error" in line]
    assert [e["line"] for e in errors] == [6, 7, 8]
    assert lines[6]["is_error"] is True
    assert [r["tool"] for r in lines[7]["history"]] == ["get_order", "cancel_order", "get_order"]


def test_shell_missing_world_is_a_clean_error(shell: Callable[..., Ran], tmp_path: Path) -> None:
    done = shell("--world", str(tmp_path / "none.yaml"), "--backend", "replay", stdin="tools\n")
    assert done.returncode != 0 and "Traceback" not in done.stderr and "none.yaml" in done.stderr


@pytest.mark.parametrize(
    ("line", "verb", "tool", "arguments"),
    [
        ("tools", "tools", "", None),
        ("  history ", "history", "", None),
        ("exit", "quit", "", None),
        ("get_order", "call", "get_order", {}),
        ('call get_order {"a": [1, 2]}', "call", "get_order", {"a": [1, 2]}),
        ('tools {"x": 1}', "call", "tools", {"x": 1}),  # a tool may be called `tools`: arguments disambiguate
    ],
)
def test_parse_line(line: str, verb: str, tool: str, arguments: dict | None) -> None:
    command = parse_line(line)
    assert command is not None and (command.verb, command.tool, command.arguments) == (verb, tool, arguments)


@pytest.mark.parametrize("line", ["call", "x {", "x 3", 'x "s"'])
def test_parse_line_errors(line: str) -> None:
    with pytest.raises(LineError):
        parse_line(line)
    assert parse_line("   ") is None and parse_line("# note") is None
