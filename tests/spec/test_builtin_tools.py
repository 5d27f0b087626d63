"""The built-in tool sets as the official prompts name them (issue 31, item 8)."""

from __future__ import annotations

import pytest

from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.render import render_tool_definitions
from aw_mcp.spec import browsergym
from aw_mcp.spec.domains import BUILTIN_TOOLS, LEGACY_TOOLS


def world(domain: str, extra: str = "") -> object:
    screen = "screen: \"RootWebArea 'Home'\"\n" if domain == "web" else ""
    return load_world_text(f"name: w\ndomain: {domain}\n{screen}{extra}")


def test_swe_has_the_official_shell_tool_and_its_file_and_todo_tools() -> None:
    """The official SWE prompt names `run_shell_command` and speaks of files, directories and todo lists (the
    Qwen Code tool family); SWE-agent's names are no longer built in."""
    names = [t["name"] for t in BUILTIN_TOOLS["swe"]]
    assert names[0] == "run_shell_command" and {"read_file", "write_file", "edit", "todo_write"} <= set(names)
    assert "execute_bash" not in names and "str_replace_editor" not in names
    shell = world("swe").tool("run_shell_command")
    assert shell.argument_problems({"command": "ls", "directory": "src", "is_background": False}) == []
    assert shell.argument_problems({"cmd": "ls"})  # the official argument is `command`


def test_a_world_naming_a_legacy_tool_still_gets_it() -> None:
    """Worlds and agents written for the earlier built-ins keep working by naming them (merged like a built-in)."""
    legacy = world(
        "swe", "tools:\n  - name: execute_bash\n    examples: [{arguments: {command: ls}, result: a.py}]\n"
    )
    bash = legacy.tool("execute_bash")
    assert bash is not None and bash.inputSchema == LEGACY_TOOLS["swe"][0]["inputSchema"]
    assert [e.result for e in bash.examples] == ["a.py"] and legacy.tool("run_shell_command") is not None
    assert world("swe").tool("execute_bash") is None


def test_search_has_the_official_three_tools_with_their_inputs() -> None:
    search = world("search")
    assert [t.name for t in search.tools] == ["web_search", "web_extractor", "dict_memory"]
    web_search = search.tool("web_search")
    assert web_search.argument_problems({"queries": ["a", "b"]}) == []  # a batch
    assert web_search.argument_problems({"query": "a"}) == []  # one query
    assert web_search.argument_problems({}) != []
    extractor = search.tool("web_extractor")
    assert list(extractor.inputSchema["properties"]) == ["url"]  # the official input is {"url"}
    assert extractor.argument_problems({"url": "https://a.example", "goal": "x"}) != []
    memory = search.tool("dict_memory")
    for operation, arguments in [
        ("add", {"dict": {"k": "v"}}),
        ("retrieve", {"key_list": ["k"]}),
        ("remove_all", {}),
    ]:
        assert memory.argument_problems({"operation": operation, **arguments}) == [], operation


@pytest.mark.parametrize(
    ("name", "signature"),
    [
        ("select_option", "select_option(bid: str, options: str | list[str])"),
        (
            "click",
            "click(bid: str, button: Literal['left', 'middle', 'right'] = 'left', modifiers: list = [])",
        ),
    ],
)
def test_web_signatures_as_the_official_action_space_writes_them(name: str, signature: str) -> None:
    assert browsergym.BY_NAME[name].signature() == signature


def test_the_web_action_space_opens_with_its_count() -> None:
    """The official web prompt's action list starts by saying how many actions there are."""
    listed = render_tool_definitions(world("web"))
    lines = listed.split("\n")
    assert lines[:2] == ["```text", "21 different types of actions are available."]
    assert lines[2] == "noop(wait_ms: float = 1000)" and lines[-2] == "report_infeasible(reason: str)"
