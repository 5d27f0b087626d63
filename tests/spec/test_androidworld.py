"""The Android domain's tools are AndroidWorld's JSON actions: typed, validated, and rendered as the rows write them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from aw_mcp.load.world import load_world, load_world_text
from aw_mcp.spec import androidworld
from aw_mcp.spec.domains import BUILTIN_TOOLS

ROOT = Path(__file__).resolve().parents[2]

# Every action type with valid arguments and the exact one-line JSON an AndroidWorld agent writes for it.
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("click", {"index": 0}, '{"action_type": "click", "index": 0}'),
    ("double_tap", {"index": 12}, '{"action_type": "double_tap", "index": 12}'),
    ("long_press", {"index": 3}, '{"action_type": "long_press", "index": 3}'),
    ("scroll", {"direction": "down"}, '{"action_type": "scroll", "direction": "down"}'),
    ("scroll", {"index": 5, "direction": "up"}, '{"action_type": "scroll", "direction": "up", "index": 5}'),
    ("swipe", {"direction": "left"}, '{"action_type": "swipe", "direction": "left"}'),
    ("input_text", {"text": "Milk"}, '{"action_type": "input_text", "text": "Milk"}'),
    (
        "input_text",
        {"index": 7, "text": 'Café at 9 — "ok"?'},
        '{"action_type": "input_text", "text": "Café at 9 — \\"ok\\"?", "index": 7}',
    ),
    ("keyboard_enter", {}, '{"action_type": "keyboard_enter"}'),
    ("navigate_home", {}, '{"action_type": "navigate_home"}'),
    ("navigate_back", {}, '{"action_type": "navigate_back"}'),
    (
        "open_app",
        {"app_name": "Simple Calendar Pro"},
        '{"action_type": "open_app", "app_name": "Simple Calendar Pro"}',
    ),
    ("wait", {}, '{"action_type": "wait"}'),
    ("status", {"goal_status": "complete"}, '{"action_type": "status", "goal_status": "complete"}'),
    ("status", {"goal_status": "infeasible"}, '{"action_type": "status", "goal_status": "infeasible"}'),
    ("answer", {"text": "Lunch is at 12:30."}, '{"action_type": "answer", "text": "Lunch is at 12:30."}'),
]

BAD: list[tuple[str, dict[str, Any]]] = [
    ("click", {}),  # missing index
    ("click", {"index": -1}),
    ("click", {"index": "3"}),
    ("click", {"index": 1.5}),
    ("click", {"index": 0, "x": 10}),  # extra field (AndroidWorld's pixel form is not published)
    ("long_press", {"element": 2}),  # the old tool's name for it
    ("scroll", {"direction": "sideways"}),  # unknown direction
    ("scroll", {"index": 2}),  # missing direction
    ("swipe", {"direction": "down", "index": 1}),  # swipe is screen-wide
    ("input_text", {"index": 4}),  # missing text
    ("input_text", {"text": ""}),
    ("open_app", {}),
    ("open_app", {"app_name": "Maps", "action_type": "open_app"}),
    ("navigate_back", {"key": "back"}),
    ("wait", {"seconds": 2}),
    ("status", {"goal_status": "done"}),
    ("status", {}),
    ("answer", {}),
]


def test_the_action_set_is_androidworlds() -> None:
    assert set(androidworld.BY_NAME) == {
        "click",
        "double_tap",
        "long_press",
        "scroll",
        "swipe",
        "input_text",
        "keyboard_enter",
        "navigate_home",
        "navigate_back",
        "open_app",
        "wait",
        "status",
        "answer",
    }
    assert {name for name, _, _ in CASES} == set(androidworld.BY_NAME)


def test_builtin_android_tools_are_the_actions() -> None:
    assert BUILTIN_TOOLS["android"] == androidworld.tools()
    world = load_world_text("name: a\ndomain: android\nscreen: s\n")
    assert [t.name for t in world.tools] == [a.name for a in androidworld.ACTIONS]
    for tool in world.tools:
        assert set(tool.model_dump(exclude_none=True, exclude_defaults=True)) == {
            "name",
            "title",
            "description",
            "inputSchema",
            "annotations",
        }
        assert tool.description.endswith(androidworld.BY_NAME[tool.name].template())


@pytest.mark.parametrize(
    ("tool", "arguments", "line"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_valid_action_validates_and_renders_as_the_row(
    tool: str, arguments: dict[str, Any], line: str
) -> None:
    spec = load_world_text("name: a\ndomain: android\nscreen: s\n").tool(tool)
    assert spec is not None
    assert spec.argument_problems(arguments) == []
    assert androidworld.render_action(tool, arguments) == line
    assert "\n" not in line


@pytest.mark.parametrize(("tool", "arguments"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_arguments_are_refused_before_the_model(tool: str, arguments: dict[str, Any]) -> None:
    schema = androidworld.BY_NAME[tool].input_schema()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(arguments)
    spec = load_world_text("name: a\ndomain: android\nscreen: s\n").tool(tool)
    assert spec is not None and spec.argument_problems(arguments)


def test_schemas_are_valid_json_schema() -> None:
    for tool in androidworld.tools():
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
        assert tool["inputSchema"]["additionalProperties"] is False


def test_unknown_tool_renders_none() -> None:
    assert androidworld.render_action("android_action", {"action": "tap", "element": 4}) is None
    assert androidworld.render_action("fill", {"bid": "a1", "value": "x"}) is None


@pytest.mark.parametrize(
    ("tool", "arguments", "line"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_parse_round_trips(tool: str, arguments: dict[str, Any], line: str) -> None:
    assert androidworld.parse_action(line) == (tool, arguments)
    assert androidworld.parse_action(f"```json\n{line}\n```") == (tool, arguments)
    assert androidworld.render_action(*androidworld.parse_action(line)) == line


def test_parse_reads_androidworlds_compact_spacing_too() -> None:
    assert androidworld.parse_action('{"action_type":"click","index":0}') == ("click", {"index": 0})


@pytest.mark.parametrize(
    "text",
    [
        "click(0)",
        "[]",
        '{"index": 0}',
        '{"action_type": "tap", "index": 0}',
        '{"action_type": 3}',
        "```json\n{\n```",
    ],
)
def test_parse_refuses_what_is_not_an_androidworld_action(text: str) -> None:
    with pytest.raises(ValueError):
        androidworld.parse_action(text)


def test_action_space_lists_every_action_in_androidworld_notation() -> None:
    lines = androidworld.action_space().splitlines()
    assert len(lines) == len(androidworld.ACTIONS)
    assert '{"action_type": "click", "index": <target_index>}' in lines
    assert '{"action_type": "input_text", "text": <text_input>, "index": <target_index>}' in lines
    assert (
        '{"action_type": "scroll", "direction": <up, down, left, right>, "index": <optional_target_index>}'
        in lines
    )
    assert '{"action_type": "open_app", "app_name": <name>}' in lines
    assert '{"action_type": "navigate_back"}' in lines


ELEMENT_LINE = re.compile(
    r"\[(?P<index>[ \d]\d)\] \| android\.[\w.]+"
    r'( \| res="[^"]+")?( \| text="[^"]*")?( \| desc="[^"]*")?'
    r" \| bounds=\[\d+,\d+\]\[\d+,\d+\]"
    r"( \| (clickable|long-clickable|scrollable|editable|focusable|focused|checkable|checked|selected))*"
)


def test_bundled_phone_screen_is_the_rows_element_list() -> None:
    world = load_world(ROOT / "worlds" / "android_phone.yaml")
    assert [t.name for t in world.tools] == [a.name for a in androidworld.ACTIONS]
    lines = (world.screen or "").rstrip("\n").splitlines()
    assert 10 <= len(lines) <= 30
    for number, line in enumerate(lines):
        match = ELEMENT_LINE.fullmatch(line)
        assert match, line
        assert match["index"] == f"{number:>2}"
    assert lines[0].startswith("[ 0] | android.widget.")
