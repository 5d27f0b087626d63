"""A problem in a world file as `file:line: field: message` (`SpecIssue`, `WorldSpecError`), and pydantic's error
locations turned into YAML paths and plain expectations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from aw_mcp.core.errors import UserError
from aw_mcp.spec.source import PathKey


@dataclass(frozen=True)
class SpecIssue:
    path: str
    line: int
    field: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.path}:{self.line}: {prefix}{self.field}: {self.message}"


class WorldSpecError(UserError, ValueError):
    """One or more problems in a world file; `str()` is one `file:line: field: message` line per problem."""

    def __init__(self, issues: list[SpecIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


def field_path(loc: PathKey) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(world)"


def expected(error: dict[str, Any]) -> str:
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        return "unknown key (check the spelling; use an `x-` prefix for your own extensions)"
    if error["type"] == "missing":
        return "required field is missing"
    return message.removeprefix("Value error, ")


def clean_loc(loc: tuple[Any, ...], data: Any = None) -> PathKey:
    """Pydantic inserts union-branch names (e.g. 'str', 'dict[str,any]') and discriminated-union tags (a fault's
    `kind`, a schedule's `mode`) into the location; they are not YAML keys. A tag is recognised as a location
    part that is not a key of the mapping at that point but equals one of its string values."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(part, str) and ("[" in part or part in {"str", "list", "dict"}):
            continue
        if isinstance(node, dict):
            if part in node:
                node = node[part]
            elif isinstance(part, str) and part in {v for v in node.values() if isinstance(v, str)}:
                continue
            else:
                node = None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
        out.append(part)
    return tuple(out)
