"""A world's shared schema definitions (`$defs:` at the top of a world file): written once, referred to from any
tool's schemas as `{"$ref": "#/$defs/NAME"}`.

An MCP tool's schema must stand alone (a client resolves its `$ref`s inside that one schema), so each tool schema
gets the definitions it uses, and those they use in turn, as its own `$defs` when the world loads: every consumer
(validation, tools/list, the grammar, the prompt) then reads self-contained schemas, exactly as a real MCP server
with shared models lists them.
"""

from __future__ import annotations

from typing import Any

from aw_mcp.spec.schema_walk import walk

PREFIX = "#/$defs/"


def _target(ref: Any) -> str | None:
    """NAME of a `#/$defs/NAME[/...]` reference (pointer-unescaped), else None."""
    if not isinstance(ref, str) or not ref.startswith(PREFIX):
        return None
    first = ref[len(PREFIX) :].split("/", 1)[0]
    return first.replace("~1", "/").replace("~0", "~")


def used_names(schema: Any, defs: dict[str, Any]) -> list[str]:
    """The names of `defs` that `schema` refers to, directly or through other definitions, in first-use order."""
    found: list[str] = []
    seen: set[str] = set()
    pending = [schema]
    while pending:
        for node in walk(pending.pop()):
            name = _target(node.schema.get("$ref"))
            if name is not None and name in defs and name not in seen:
                seen.add(name)
                found.append(name)
                pending.append(defs[name])
    return found


def with_defs(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` standing alone: the shared definitions it uses added to its own `$defs` (its own win)."""
    if not isinstance(schema, dict) or not defs:
        return schema
    own = schema.get("$defs") if isinstance(schema.get("$defs"), dict) else {}
    names = [n for n in used_names(schema, defs) if n not in own]
    if not names:
        return schema
    return {**schema, "$defs": {**own, **{n: defs[n] for n in names}}}


def without_shared(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` less the shared definitions `with_defs` added (the prompt lists them once, apart)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("$defs"), dict):
        return schema
    kept = {n: s for n, s in schema["$defs"].items() if not (n in defs and defs[n] == s)}
    out = {k: v for k, v in schema.items() if k != "$defs"}
    if kept:
        out["$defs"] = kept
    return out
