"""The web domain's action space: BrowserGym's 21 functions, as typed MCP tools and as the calls the model reads.

The world model was trained on web actions written as BrowserGym calls (`click('a12')`, `fill('a12', 'tent')`,
`scroll(0, 300)`), with page elements addressed by their `bid` strings. Each function here is one MCP tool of the
same name; its parameters keep BrowserGym's names, order and defaults, so a validated call renders back to exactly
the call BrowserGym would run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aw_mcp.spec.action_space import object_schema

_BUTTON: dict[str, Any] = {
    "enum": ["left", "middle", "right"],
    "default": "left",
    "description": "Mouse button.",
}
_BID: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "description": "The element's bid, as shown in brackets in the current page's accessibility tree (e.g. 'a12').",
}
_COORD = {"type": "number", "description": "Pixels from the viewport's left (x) or top (y) edge."}


@dataclass(frozen=True)
class Param:
    name: str
    schema: dict[str, Any]
    required: bool = True

    @property
    def default(self) -> Any:
        return self.schema.get("default")


@dataclass(frozen=True)
class Function:
    name: str
    description: str
    params: tuple[Param, ...] = ()
    read_only: bool = False

    def signature(self) -> str:
        """The function as BrowserGym documents it, e.g. `fill(bid: str, value: str, ...)`."""
        parts = []
        for p in self.params:
            annotation = _annotation(p.schema)
            parts.append(f"{p.name}: {annotation}" + ("" if p.required else f" = {_python(p.default)}"))
        return f"{self.name}({', '.join(parts)})"

    def input_schema(self) -> dict[str, Any]:
        return object_schema(self.params)

    def tool(self) -> dict[str, Any]:
        """The MCP tool (YAML/wire shape) for this function."""
        return {
            "name": self.name,
            "title": f"BrowserGym {self.name}",
            "description": f"{self.description} BrowserGym: {self.signature()}",
            "inputSchema": self.input_schema(),
            "annotations": {"readOnlyHint": self.read_only, "openWorldHint": True},
        }

    def call(self, arguments: dict[str, Any]) -> str:
        """The BrowserGym call for validated arguments: required parameters positionally, the optional ones given
        with a non-default value by keyword (`click('a12', button='right')`)."""
        args = [_python(arguments[p.name]) for p in self.params if p.required and p.name in arguments]
        for p in self.params:
            if not p.required and p.name in arguments and arguments[p.name] != p.default:
                args.append(f"{p.name}={_python(arguments[p.name])}")
        return f"{self.name}({', '.join(args)})"


def _annotation(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "Literal[" + ", ".join(_python(v) for v in schema["enum"]) + "]"
    if "anyOf" in schema:
        return " | ".join(_annotation(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if (
        kind == "array"
    ):  # `list[str]` where the items have a type, `list` otherwise (the official web prompt's)
        items = schema.get("items")
        inner = items.get("type") if isinstance(items, dict) else None
        return f"list[{_annotation(items)}]" if isinstance(inner, str) else "list"
    return {"string": "str", "number": "float", "integer": "int", "boolean": "bool"}.get(str(kind), "Any")


def _python(value: Any) -> str:
    """A JSON value as Python source (strings single-quoted as BrowserGym's examples write them)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "None"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(_python(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_python(k)}: {_python(v)}" for k, v in value.items()) + "}"
    return repr(value)


FUNCTIONS: tuple[Function, ...] = (
    Function(
        "noop",
        "Do nothing and wait, e.g. for a page to finish loading.",
        (Param("wait_ms", {"type": "number", "minimum": 0, "default": 1000}, required=False),),
        read_only=True,
    ),
    Function(
        "mouse_move",
        "Move the mouse to a position in the viewport.",
        (Param("x", _COORD), Param("y", _COORD)),
    ),
    Function(
        "mouse_click",
        "Click at a position in the viewport.",
        (Param("x", _COORD), Param("y", _COORD), Param("button", _BUTTON, required=False)),
    ),
    Function(
        "mouse_dblclick",
        "Double-click at a position in the viewport.",
        (Param("x", _COORD), Param("y", _COORD), Param("button", _BUTTON, required=False)),
    ),
    Function(
        "mouse_down",
        "Press a mouse button at a position (hold it until mouse_up).",
        (Param("x", _COORD), Param("y", _COORD), Param("button", _BUTTON, required=False)),
    ),
    Function(
        "mouse_up",
        "Release a mouse button at a position.",
        (Param("x", _COORD), Param("y", _COORD), Param("button", _BUTTON, required=False)),
    ),
    Function(
        "scroll",
        "Scroll the page by a number of pixels (positive delta_y scrolls down).",
        (Param("delta_x", {"type": "number"}), Param("delta_y", {"type": "number"})),
    ),
    Function(
        "click",
        "Click an element.",
        (
            Param("bid", _BID),
            Param("button", _BUTTON, required=False),
            Param(
                "modifiers",
                {
                    "type": "array",
                    "items": {"enum": ["Alt", "Control", "ControlOrMeta", "Meta", "Shift"]},
                    "default": [],
                    "description": "Keys held while clicking.",
                },
                required=False,
            ),
        ),
    ),
    Function(
        "keyboard_press",
        "Press a key or a key combination on the focused element, e.g. 'Enter', 'Backspace', 'ControlOrMeta+a'.",
        (Param("key", {"type": "string", "minLength": 1}),),
    ),
    Function("keyboard_type", "Type text into the focused element.", (Param("text", {"type": "string"}),)),
    Function(
        "fill",
        "Clear an input field, text area or content-editable element and fill in a value.",
        (
            Param("bid", _BID),
            Param("value", {"type": "string"}),
            Param("enable_autocomplete_menu", {"type": "boolean", "default": False}, required=False),
        ),
    ),
    Function("hover", "Hover the mouse over an element.", (Param("bid", _BID),)),
    Function(
        "tab_focus",
        "Bring the browser tab at this index (0-based) to the front.",
        (Param("index", {"type": "integer", "minimum": 0}),),
    ),
    Function("new_tab", "Open a new, empty browser tab and focus it."),
    Function("go_back", "Go back to the previous page in the tab's history."),
    Function("go_forward", "Go forward to the next page in the tab's history."),
    Function(
        "goto", "Navigate the current tab to a URL.", (Param("url", {"type": "string", "minLength": 1}),)
    ),
    Function("tab_close", "Close the current tab."),
    Function(
        "select_option",
        "Select one or several options of a <select> (or listbox) element, by their labels or values.",
        (
            Param("bid", _BID),
            Param(
                "options",
                {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    ]
                },
            ),
        ),
    ),
    Function(
        "send_msg_to_user",
        "Send a message to the user in the chat (e.g. the answer to their question).",
        (Param("text", {"type": "string"}),),
        read_only=True,
    ),
    Function(
        "report_infeasible",
        "Tell the user the task cannot be done, and why.",
        (Param("reason", {"type": "string"}),),
        read_only=True,
    ),
)

BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}


def tools() -> list[dict[str, Any]]:
    return [f.tool() for f in FUNCTIONS]


def render_call(name: str, arguments: dict[str, Any]) -> str | None:
    """The BrowserGym call for this tool call, or None when `name` is not a BrowserGym function."""
    function = BY_NAME.get(name)
    return function.call(arguments) if function is not None else None


def action_space(names: list[str] | None = None) -> str:
    """The functions' signatures (`names`: these; default all), one per line after the count, as the official web
    prompt's action space lists them."""
    chosen = FUNCTIONS if names is None else [BY_NAME[n] for n in names]
    return "\n".join(
        [f"{len(chosen)} different types of actions are available.", *(f.signature() for f in chosen)]
    )
