"""OpenAPI schema objects → self-contained JSON Schema 2020-12, as the world spec and MCP clients expect.

- local `$ref`s (`#/...`) are inlined; a reference back into a schema being expanded (a cycle) is cut there and
  replaced by a described, unconstrained stub, with a warning; other references become `{}` with a warning;
- OpenAPI 3.0 dialect: `nullable` becomes a type array (or `anyOf` with null), `example` becomes `examples`,
  boolean `exclusiveMinimum/Maximum` become the 2020-12 numbers;
- OpenAPI-only keywords (`discriminator`, `xml`, `externalDocs`) and `x-` extensions are dropped;
- `readOnly` properties leave request schemas and `writeOnly` properties leave response schemas, because the
  agent never sends the former and never sees the latter.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from aw_mcp.importers.import_log import ImportLog, child_pointer
from aw_mcp.spec.schema_walk import SCHEMA_LIST, SCHEMA_MAP, SCHEMA_ONE, LocalRefs

Direction = Literal["request", "response"]

_DROPPED = {"discriminator", "xml", "externalDocs"}
_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
_MAX_REF_HOPS = 32
# Inlining shared components repeats them at every use; on large real-world specs (hundreds of schemas that reference
# each other) one tool's schema could grow without bound. Past this many expansions the rest are stubbed.
MAX_REF_EXPANSIONS = 500


class OpenAPIDocument:
    """The parsed document plus pointer resolution, shared by the schema converter and the operation importer."""

    def __init__(self, data: dict[str, Any], log: ImportLog):
        self.data = data
        self.log = log
        version = str(data.get("openapi", ""))
        self.is_30 = version.startswith("3.0")
        self._pointers = LocalRefs(data)

    def lookup(self, ref: str) -> Any:
        """The node at a local reference `#/a/b~1c` (percent-escapes allowed), or None when it does not exist."""
        return self._pointers.get(ref)

    def deref(self, node: Any, pointer: str) -> tuple[Any, str]:
        """Follow `$ref` chains of non-schema objects (parameters, bodies, responses, examples)."""
        for _ in range(_MAX_REF_HOPS):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node, pointer
            ref = node["$ref"]
            if not ref.startswith("#"):
                self.log.warn(pointer, f"external $ref {ref!r} is not supported; ignored")
                return None, pointer
            target = self.lookup(ref)
            if target is None:
                self.log.warn(pointer, f"$ref {ref!r} points at nothing; ignored")
                return None, pointer
            node, pointer = target, ref
        self.log.warn(pointer, "$ref chain too long (a cycle?); ignored")
        return None, pointer

    def schema(self, node: Any, pointer: str, direction: Direction) -> Any:
        return SchemaConverter(self, direction).convert(node, pointer)


class SchemaConverter:
    def __init__(self, document: OpenAPIDocument, direction: Direction):
        self.document = document
        self.log = document.log
        self.direction = direction
        self.expansions_left = MAX_REF_EXPANSIONS

    def convert(self, node: Any, pointer: str, expanding: tuple[str, ...] = ()) -> Any:
        if isinstance(node, bool):
            return node  # 3.1 allows boolean schemas
        if not isinstance(node, dict):
            self.log.warn(
                pointer, f"expected a schema object, found {type(node).__name__}; left unconstrained"
            )
            return {}
        if isinstance(node.get("$ref"), str):
            return self._reference(node, pointer, expanding)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str) or key.startswith("x-") or key in _DROPPED or key == "nullable":
                continue
            where = child_pointer(pointer, key)
            if key in SCHEMA_MAP and isinstance(value, dict):
                out[key] = {
                    name: self.convert(sub, child_pointer(where, name), expanding)
                    for name, sub in value.items()
                }
            elif key in SCHEMA_LIST and isinstance(value, list):
                out[key] = [
                    self.convert(sub, child_pointer(where, i), expanding) for i, sub in enumerate(value)
                ]
            elif key == "items" and isinstance(value, list):  # draft-4 tuple form
                out["prefixItems"] = [
                    self.convert(s, child_pointer(where, i), expanding) for i, s in enumerate(value)
                ]
            elif key in SCHEMA_ONE and isinstance(value, dict | bool):
                out[key] = self.convert(value, where, expanding)
            elif key == "example":
                out.setdefault("examples", [copy.deepcopy(value)])
            elif key == "examples":
                out["examples"] = self._examples(value, where)
            elif key == "type":
                self._type(value, out, where)
            elif key == "required" and not (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                self.log.warn(where, "`required` must be a list of property names here; dropped")
            else:
                out[key] = copy.deepcopy(value)
        self._exclusive_bounds(out)
        self._visibility(out)
        if node.get("nullable") is True:
            out = self._nullable(out)
        return out

    # --- references ---------------------------------------------------------------------------------------------

    def _reference(self, node: dict[str, Any], pointer: str, expanding: tuple[str, ...]) -> Any:
        ref = node["$ref"]
        if not ref.startswith("#"):
            self.log.warn(pointer, f"external $ref {ref!r} is not supported; left unconstrained")
            return {}
        target = self.document.lookup(ref)
        if target is None:
            self.log.warn(pointer, f"$ref {ref!r} points at nothing; left unconstrained")
            return {}
        if ref in expanding:
            return self._cycle_stub(ref, target, pointer)
        if self.expansions_left <= 0:
            self.log.warn(pointer, f"schema too large to inline: {ref} left unconstrained here")
            return {"description": f"A {ref.rsplit('/', 1)[-1]} (not expanded: the schema is too large)."}
        self.expansions_left -= 1
        resolved = self.convert(target, ref, (*expanding, ref))
        siblings = {k: v for k, v in node.items() if k != "$ref" and not k.startswith("x-")}
        if not siblings or not isinstance(resolved, dict):
            return resolved
        # 3.1 allows keywords next to $ref: annotations override, constraints must hold as well.
        notes = {k: siblings.pop(k) for k in ("description", "title", "summary") if k in siblings}
        if "summary" in notes:  # a Reference Object's summary is a description in JSON Schema terms
            summary = notes.pop("summary")
            notes.setdefault("description", summary)
        if siblings:
            resolved = {"allOf": [resolved, self.convert(siblings, pointer, expanding)]}
        return {**resolved, **notes}

    def _cycle_stub(self, ref: str, target: Any, pointer: str) -> dict[str, Any]:
        name = ref.rsplit("/", 1)[-1]
        self.log.warn(pointer, f"$ref cycle through {ref}: cut here; the nested {name} is left unconstrained")
        stub: dict[str, Any] = {
            "description": f"A nested {name} (recursive: the same shape as the enclosing {name})."
        }
        if isinstance(target, dict) and isinstance(target.get("type"), str) and target["type"] in _JSON_TYPES:
            stub["type"] = [target["type"], "null"] if target.get("nullable") is True else target["type"]
        return stub

    # --- OpenAPI 3.0 dialect ------------------------------------------------------------------------------------

    def _type(self, value: Any, out: dict[str, Any], pointer: str) -> None:
        names = value if isinstance(value, list) else [value]
        valid = [t for t in names if isinstance(t, str) and t in _JSON_TYPES]
        if len(valid) != len(names):
            bad = [t for t in names if t not in _JSON_TYPES]
            self.log.warn(pointer, f"unknown type {bad!r} is not JSON Schema; dropped")
        if valid:
            out["type"] = valid if isinstance(value, list) else valid[0]

    def _examples(self, value: Any, pointer: str) -> list[Any]:
        if isinstance(value, list):
            return copy.deepcopy(value)
        if isinstance(value, dict):  # an OpenAPI Example map written inside a schema
            self.log.warn(pointer, "`examples` in a schema must be a list; took the values of the map")
            return [copy.deepcopy(v.get("value", v) if isinstance(v, dict) else v) for v in value.values()]
        return [copy.deepcopy(value)]

    @staticmethod
    def _exclusive_bounds(out: dict[str, Any]) -> None:
        for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            flag = out.get(exclusive)
            if isinstance(flag, bool):
                del out[exclusive]
                if flag and bound in out:
                    out[exclusive] = out.pop(bound)

    @staticmethod
    def _nullable(out: dict[str, Any]) -> dict[str, Any]:
        kind = out.get("type")
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
            return out
        if isinstance(kind, list):
            out["type"] = kind if "null" in kind else [*kind, "null"]
            return out
        return {"anyOf": [out, {"type": "null"}]}

    def _visibility(self, out: dict[str, Any]) -> None:
        """Drop properties the agent never exchanges in this direction (readOnly in requests, writeOnly in
        responses) together with their `required` entries."""
        hidden_flag = "readOnly" if self.direction == "request" else "writeOnly"
        properties = out.get("properties")
        if not isinstance(properties, dict):
            return
        hidden = [n for n, s in properties.items() if isinstance(s, dict) and s.get(hidden_flag) is True]
        for name in hidden:
            del properties[name]
        if hidden and isinstance(out.get("required"), list):
            out["required"] = [n for n in out["required"] if n not in hidden]
            if not out["required"]:
                del out["required"]
