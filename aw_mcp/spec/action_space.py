"""What the GUI action spaces share (browsergym.py's BrowserGym functions, androidworld.py's AndroidWorld actions):
an action's parameters as one closed JSON-Schema object, so a validated call renders back to exactly the action."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class ActionParam(Protocol):
    name: str
    schema: dict[str, Any]
    required: bool


def object_schema(params: Iterable[ActionParam]) -> dict[str, Any]:
    """The inputSchema of an action: its parameters, the required ones required, nothing else allowed."""
    params = list(params)
    return {
        "type": "object",
        "properties": {p.name: p.schema for p in params},
        "required": [p.name for p in params if p.required],
        "additionalProperties": False,
    }
