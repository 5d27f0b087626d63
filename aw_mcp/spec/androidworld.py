"""The Android domain's action space: AndroidWorld's JSON actions, as typed MCP tools and as the lines the model reads.

The world model was trained on Android actions written as AndroidWorld JSON actions, one compact line in a json fence:
`{"action_type": "open_app", "app_name": "Simple Calendar Pro"}`, `{"action_type": "click", "index": 0}`, with screen
elements addressed by the integer `index` the current screen shows. Each action type here is one MCP tool of the same
name; its parameters keep AndroidWorld's argument names (`index`, `text`, `direction`, `app_name`, `goal_status`) and the
key order its agents' prompts write them in, so a validated call renders back to exactly the line an AndroidWorld agent
emits (`android_world/env/json_action.py` for the action types and keys, `android_world/agents/m3a.py` and `t3a.py` for
the argument order).

AndroidWorld also accepts `x`/`y` pixel targets instead of `index` and a few keys no agent prompt offers (`keycode`,
`clear_text`); the tools publish only the index form, the one the training rows use.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from aw_mcp.spec.action_space import object_schema

ACTION_TYPE = "action_type"

_INDEX: dict[str, Any] = {
    "type": "integer",
    "minimum": 0,
    "description": "The element's index, as shown in brackets at the start of its line on the current screen.",
}
_DIRECTION: dict[str, Any] = {"enum": ["up", "down", "left", "right"]}


@dataclass(frozen=True)
class Param:
    name: str
    schema: dict[str, Any]
    required: bool = True
    placeholder: str = ""  # what AndroidWorld's prompts write in place of the value, e.g. <target_index>

    def template(self) -> str:
        return f"{json.dumps(self.name)}: {self.placeholder or '<' + self.name + '>'}"


@dataclass(frozen=True)
class Action:
    name: str
    description: str
    params: tuple[Param, ...] = ()
    read_only: bool = False

    def template(self) -> str:
        """The action's JSON form with placeholders, e.g. `{"action_type": "click", "index": <target_index>}`."""
        parts = [f'"{ACTION_TYPE}": {json.dumps(self.name)}', *(p.template() for p in self.params)]
        return "{" + ", ".join(parts) + "}"

    def input_schema(self) -> dict[str, Any]:
        return object_schema(self.params)

    def tool(self) -> dict[str, Any]:
        """The MCP tool (YAML/wire shape) for this action type."""
        annotations: dict[str, Any] = {"readOnlyHint": self.read_only, "openWorldHint": False}
        if not self.read_only:
            annotations["destructiveHint"] = True  # a tap can delete, send or pay
        return {
            "name": self.name,
            "title": f"AndroidWorld {self.name}",
            "description": f"{self.description} AndroidWorld: {self.template()}",
            "inputSchema": self.input_schema(),
            "annotations": annotations,
        }

    def action(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The AndroidWorld action dict: action_type first, then the parameters in AndroidWorld's order (any key
        the schema does not know, which validation refuses before this, kept after them)."""
        known = [p.name for p in self.params]
        action: dict[str, Any] = {ACTION_TYPE: self.name}
        action.update((name, arguments[name]) for name in known if name in arguments)
        action.update((k, v) for k, v in arguments.items() if k not in known and k != ACTION_TYPE)
        return action

    def line(self, arguments: dict[str, Any]) -> str:
        """The action as one line of JSON, spaced as the rows write it: `{"action_type": "click", "index": 0}`."""
        return json.dumps(self.action(arguments), ensure_ascii=False)


ACTIONS: tuple[Action, ...] = (
    Action(
        "click",
        "Tap an element of the current screen.",
        (Param("index", _INDEX, placeholder="<target_index>"),),
    ),
    Action(
        "double_tap",
        "Tap an element twice in quick succession.",
        (Param("index", _INDEX, placeholder="<target_index>"),),
    ),
    Action(
        "long_press",
        "Press and hold an element (context menus, text selection, moving icons).",
        (Param("index", _INDEX, placeholder="<target_index>"),),
    ),
    Action(
        "scroll",
        "Scroll the whole screen, or the scrollable element given by index, so that content further in that "
        "direction comes into view ('down' reveals what is below). The opposite of swipe.",
        (
            Param("direction", _DIRECTION, placeholder="<up, down, left, right>"),
            Param(
                "index",
                {
                    **_INDEX,
                    "description": "The scrollable element to scroll; leave out to scroll the whole screen.",
                },
                required=False,
                placeholder="<optional_target_index>",
            ),
        ),
    ),
    Action(
        "swipe",
        "Swipe a finger across the whole screen in a direction ('up' moves the content up, e.g. to open the app "
        "drawer from the home screen; 'left' turns to the next page).",
        (Param("direction", _DIRECTION, placeholder="<up, down, left, right>"),),
    ),
    Action(
        "input_text",
        "Type text into a text field: taps the field given by index first (or types into the focused one when "
        "index is left out), types the text, then presses Enter.",
        (
            Param("text", {"type": "string", "minLength": 1}, placeholder="<text_input>"),
            Param(
                "index",
                {
                    **_INDEX,
                    "description": "The text field to type into; leave out to type into the focused field.",
                },
                required=False,
                placeholder="<target_index>",
            ),
        ),
    ),
    Action("keyboard_enter", "Press the Enter key of the keyboard."),
    Action("navigate_home", "Go to the home screen."),
    Action("navigate_back", "Go back (the system Back gesture)."),
    Action(
        "open_app",
        "Launch an installed app by its name, as the launcher labels it; nothing happens if no such app is installed.",
        (Param("app_name", {"type": "string", "minLength": 1}, placeholder="<name>"),),
    ),
    Action("wait", "Wait a moment for the screen to update.", read_only=True),
    Action(
        "status",
        "End the task: 'complete' when it is done, 'infeasible' when it cannot be done.",
        (Param("goal_status", {"enum": ["complete", "infeasible"]}, placeholder="<complete, infeasible>"),),
        read_only=True,
    ),
    Action(
        "answer",
        "Answer the user's question in text (the phone's screen does not change).",
        (Param("text", {"type": "string", "minLength": 1}, placeholder='"<answer_text>"'),),
        read_only=True,
    ),
)

BY_NAME: dict[str, Action] = {a.name: a for a in ACTIONS}


def tools() -> list[dict[str, Any]]:
    return [a.tool() for a in ACTIONS]


def render_action(tool: str, arguments: dict[str, Any]) -> str | None:
    """The AndroidWorld JSON action for this tool call as one line (not fenced), or None when `tool` is not an
    AndroidWorld action type."""
    action = BY_NAME.get(tool)
    return action.line(arguments) if action is not None else None


def action_space() -> str:
    """Every action's JSON form with placeholders, one per line, as AndroidWorld's agent prompts list them."""
    return "\n".join(a.template() for a in ACTIONS)


_FENCE = re.compile(r"\A```[A-Za-z]*\n(?P<body>.*?)\n?```\Z", re.DOTALL)


def parse_action(text: str) -> tuple[str, dict[str, Any]]:
    """A row's action (one JSON object, optionally inside a ``` fence) as (tool, arguments). Raises ValueError when
    the text is not a JSON object naming one of the AndroidWorld action types above."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a JSON action: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("an AndroidWorld action is a JSON object")
    arguments = dict(value)
    name = arguments.pop(ACTION_TYPE, None)
    if not isinstance(name, str) or name not in BY_NAME:
        raise ValueError(f"unknown or missing action_type {name!r}; expected one of {', '.join(BY_NAME)}")
    return name, arguments
