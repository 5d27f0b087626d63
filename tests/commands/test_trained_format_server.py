"""The trained format end to end: `aw-mcp call` against a scripted OpenAI-compatible server, checking the requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aw_mcp.cli import main
from aw_mcp.load.world import load_world
from aw_mcp.prompt.render import render_tool_definitions
from tests.fake_openai import Reply, ScriptedOpenAIServer

TERMINAL = """\
name: box
domain: terminal
now: "2026-01-01T00:00:00Z"
state:
  host: {hostname: box, user: root}
  files: {/app/run.sh: "echo hi"}
screen: |
  root@box:/app# ls
  run.sh
  root@box:/app# \n"""

WEB = "name: shop\ndomain: web\nnow: '2026-01-01T00:00:00Z'\nscreen: |\n  [a12] searchbox 'Search'\n"

SWE = "name: repo\ndomain: swe\nnow: '2026-01-01T00:00:00Z'\nstate: {files: {/testbed/a.py: 'x = 1'}}\n"
# A world that names the tools an earlier version had built in: it gets them (domains.LEGACY_TOOLS).
SWE_LEGACY = SWE + "tools: [{name: str_replace_editor}, {name: execute_bash}]\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def call(world: Path, server: ScriptedOpenAIServer, tool: str, arguments: dict, *extra: str) -> int:
    argv = [
        "call",
        "--world",
        str(world),
        tool,
        "--args",
        json.dumps(arguments),
        "--base-url",
        server.base_url,
    ]
    return main([*argv, *extra])


def test_terminal_turn_one_is_the_screen_verbatim_never_the_state(tmp_path: Path) -> None:
    world = write(tmp_path, "box.yaml", TERMINAL)
    with ScriptedOpenAIServer(
        [Reply(content="**Environment Observation:**\nroot@box:/app# pwd\n/app\n")]
    ) as server:
        assert call(world, server, "send_keys", {"keystrokes": "pwd\n"}) == 0
    body = server.requests[0].body
    user = body["messages"][-1]["content"]
    assert user.startswith(
        "### Turn 1\n**Current State:**\nroot@box:/app# ls\nrun.sh\nroot@box:/app# \n\n**Action:**\n"
    )
    assert "hostname" not in user and "files:" not in user and "Current Screen" not in user
    assert "hostname: box" in body["messages"][0]["content"]  # the hidden state lives in the system prompt
    assert body["max_tokens"] == 32768 and body["temperature"] == 0.6
    assert "top_p" not in body and "top_k" not in body and "chat_template_kwargs" not in body


def test_fast_mode_keeps_its_smaller_budget(tmp_path: Path) -> None:
    world = write(tmp_path, "box.yaml", TERMINAL)
    with ScriptedOpenAIServer([Reply(content="root@box:/app# ")]) as server:
        assert call(world, server, "send_keys", {"keystrokes": "\n"}, "--no-thinking") == 0
    body = server.requests[0].body
    assert body["max_tokens"] == 8192 and body["chat_template_kwargs"] == {"enable_thinking": False}


def test_web_lists_browsergym_tools_and_fill_reaches_the_model_as_the_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = write(tmp_path, "shop.yaml", WEB)
    page = "<predicted_observation>\n[a12] searchbox 'Search' value='tent' focused\n</predicted_observation>"
    with ScriptedOpenAIServer([Reply(content=page)]) as server:
        assert call(world, server, "fill", {"bid": "a12", "value": "tent"}) == 0
        assert call(world, server, "click", {"element": 12}) == 1  # the old integer index: rejected
        assert call(world, server, "fill", {"bid": 12, "value": "tent"}) == 1  # a bid is a string
        assert call(world, server, "type", {"text": "x"}) == 1  # not a BrowserGym function
    assert len(server.requests) == 1  # the invalid calls never reached the model
    messages = server.requests[0].body["messages"]
    assert "fill(bid: str, value: str, enable_autocomplete_menu: bool = False)" in messages[0]["content"]
    assert messages[-1]["content"].endswith("**Action:**\n```\nfill('a12', 'tent')\n```")
    out = capsys.readouterr()
    assert "[a12] searchbox 'Search' value='tent' focused" in out.out
    assert "Invalid arguments for tool fill" in out.out and "Unknown tool" in out.err


def test_view_output_keeps_its_leading_spaces_in_the_next_calls_history(tmp_path: Path) -> None:
    world = write(tmp_path, "repo.yaml", SWE_LEGACY)
    trajectory = tmp_path / "t.jsonl"
    listing = "     1\tx = 1\n     2\t"
    replies = [
        Reply(content=f"<think>cat -n style</think>\n**Environment Observation:**\n{listing}\n"),
        Reply(content="**Environment Observation:**\nx = 1"),
    ]
    with ScriptedOpenAIServer(replies) as server:
        view = {"command": "view", "path": "/testbed/a.py"}
        assert call(world, server, "str_replace_editor", view, "--record", str(trajectory)) == 0
        assert call(world, server, "execute_bash", {"command": "cat a.py"}, "--resume", str(trajectory)) == 0
    history = server.requests[1].body["messages"]
    assert history[2] == {"role": "assistant", "content": f"**Environment Observation:**\n{listing}"}
    assert history[1]["content"].startswith(
        '### Turn 1\n**Action:**\n```json\n{\n  "name": "str_replace_editor",'
    )


def test_a_prompts_dir_with_only_the_official_slots_keeps_its_text_and_gets_the_world(tmp_path: Path) -> None:
    """Issue 31.4: the official SWE template's own text is kept byte for byte; the world it has no slot for
    (description, clock, facts, state) and the line introducing the per-step notes follow the demonstrations in
    its `{demonstrations}` slot."""
    world = write(tmp_path, "repo.yaml", SWE.replace("now:", "facts: [The sandbox has no network.]\nnow:"))
    (tmp_path / "mine" / "swe").mkdir(parents=True)
    template = "# Role and Objective\n\nOfficial-style.\n\n{tool_definitions}\n\n{demonstrations}"
    (tmp_path / "mine" / "swe" / "system_prompt.txt").write_text(template, encoding="utf-8")
    with ScriptedOpenAIServer([Reply(content="**Environment Observation:**\nok")]) as server:
        prompts = str(tmp_path / "mine")
        assert call(world, server, "run_shell_command", {"command": "true"}, "--prompts", prompts) == 0
    system = server.requests[0].body["messages"][0]["content"]
    definitions = render_tool_definitions(load_world(world))
    assert system.startswith(
        f"# Role and Objective\n\nOfficial-style.\n\n{definitions}\n\n\n## This World\nrepo"
    )
    assert definitions.startswith('[\n  {\n    "name": "run_shell_command"')
    for part in (
        "## Current Time\n2026-01-01T00:00:00Z",
        "1. The sandbox has no network.",
        "/testbed/a.py: x = 1",
    ):
        assert part in system
    assert system.rstrip().endswith("Follow them silently; never mention them.")


def test_unknown_slot_stops_at_start_up_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = write(tmp_path, "repo.yaml", SWE.replace("name: repo\n", "name: repo\nprompts: mine\n"))
    (tmp_path / "mine" / "swe").mkdir(parents=True)
    (tmp_path / "mine" / "swe" / "system_prompt.txt").write_text(
        "# Role\n\n{tool_definitons}\n", encoding="utf-8"
    )
    with ScriptedOpenAIServer([Reply(content="never asked")]) as server:
        assert call(world, server, "execute_bash", {"command": "true"}) == 1
    assert not server.requests
    err = capsys.readouterr().err
    assert f"{tmp_path / 'mine' / 'swe' / 'system_prompt.txt'}:3: unknown slot {{tool_definitons}}" in err
