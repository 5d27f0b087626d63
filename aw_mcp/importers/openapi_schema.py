"""OpenAPI schema objects → JSON Schema 2020-12, as the world spec and MCP clients expect.

- a component schema (`#/components/schemas/NAME`) is converted once and kept once, as the world's `$defs` entry
  NAME, which every use refers to (`{"$ref": "#/$defs/NAME"}`), recursion included; a request or response whose
  root is a component gets that component's own keywords at its root (its arguments and its object shape stay
  visible), the components under it stay references. Real APIs share their schemas widely: inlining them at every
  use made the Star Trek API's tools 471,822 prompt tokens;
- other local `$ref`s (`#/paths/...`) are inlined; a reference back into a schema being expanded (a cycle) is cut
  there and replaced by a described, unconstrained stub, with a warning; other references become `{}` with a warning;
- OpenAPI 3.0 dialect: `nullable` becomes a type array (or `anyOf` with null), `example` becomes `examples`,
  boolean `exclusiveMinimum/Maximum` become the 2020-12 numbers;
- OpenAPI-only keywords (`discriminator`, `xml`, `externalDocs`) and `x-` extensions are dropped;
- `readOnly` properties leave request schemas and `writeOnly` properties leave response schemas, because the
  agent never sends the former and never sees the latter. A component holding such a property (itself or through
  the components it uses) gets one definition per direction: NAME as responses show it, `NAME.request` as
  requests send it;
- the parts of an `allOf` that are components are opened in place (the usual "Base + extra fields" pattern stays
  one object that arguments flatten from and the answer grammar merges), the components under them stay
  references.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

from aw_mcp.importers.import_log import ImportLog, child_pointer
from aw_mcp.spec.schema_walk import SCHEMA_LIST, SCHEMA_MAP, SCHEMA_ONE, LocalRefs, walk

Direction = Literal["request", "response"]
DIRECTIONS: tuple[Direction, ...] = ("request", "response")

_DROPPED = {"discriminator", "xml", "externalDocs"}
_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
_MAX_REF_HOPS = 32
# Inlining a non-component reference repeats it at every use; past this many expansions in one schema the rest
# are stubbed (component schemas are never inlined, so real documents stay far below it).
MAX_REF_EXPANSIONS = 500
_COMPONENT = re.compile(r"^#/components/schemas/([^/]+)$")
_HIDDEN_FLAG: dict[Direction, str] = {"request": "readOnly", "response": "writeOnly"}
DEFS_PREFIX = "#/$defs/"


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def def_name(component: str, taken: set[str]) -> str:
    """A `$defs` key a JSON pointer carries plainly (`[A-Za-z0-9_.-]`), unique among `taken`."""
    base = re.sub(r"[^A-Za-z0-9_.\-]+", "_", component).strip("_") or "schema"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


class OpenAPIDocument:
    """The parsed document plus pointer resolution, shared by the schema converter and the operation importer.
    `definitions` collects the component schemas converted so far, under their `$defs` names."""

    def __init__(self, data: dict[str, Any], log: ImportLog):
        self.data = data
        self.log = log
        version = str(data.get("openapi", ""))
        self.is_30 = version.startswith("3.0")
        self._pointers = LocalRefs(data)
        self.definitions: dict[str, Any] = {}
        self._def_names: dict[tuple[str, Direction | None], str] = {}
        self._taken: set[str] = set()
        self._hides: dict[str, set[Direction]] | None = None

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
        """`node` as JSON Schema: a root component reference opened to that component's keywords (see the
        module's doc), every component under it a `$defs` reference."""
        converter = SchemaConverter(self, direction)
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            match = _COMPONENT.match(node["$ref"])
            target = self.lookup(node["$ref"]) if match else None
            if target is None or node["$ref"] in seen or set(node) - {"$ref", "description", "summary"}:
                break
            seen.add(node["$ref"])
            notes = {k: node[k] for k in ("description",) if k in node}
            pointer, node = node["$ref"], {**target, **notes} if isinstance(target, dict) else target
        return converter.convert(node, pointer)

    # --- component schemas, once each ---------------------------------------------------------------------------

    def definition(self, component: str, direction: Direction) -> str:
        """The `$defs` name of component schema `component` as seen in `direction`, converted on first use: NAME,
        and NAME.request for the request side of a component that differs between the two."""
        variant: Direction | None = direction if self.hides(component) else None
        key = (component, variant)
        name = self._def_names.get(key)
        if name is not None:
            return name
        wanted = f"{component}.request" if variant == "request" else component
        name = self._def_names[key] = def_name(wanted, self._taken)
        self.definitions[name] = {}  # reserved first: a recursive component refers to itself while converting
        ref = f"#/components/schemas/{component}"
        self.definitions[name] = SchemaConverter(self, direction).convert(self.lookup(ref), ref)
        return name

    def hides(self, component: str) -> set[Direction]:
        """The directions in which `component` loses a property (readOnly in requests, writeOnly in responses),
        itself or through the components it refers to."""
        if self._hides is None:
            self._hides = self._hidden_directions()
        return self._hides.get(component, set())

    def _hidden_directions(self) -> dict[str, set[Direction]]:
        components = (self.data.get("components") or {}).get("schemas") or {}
        if not isinstance(components, dict):
            return {}
        direct: dict[str, set[Direction]] = {}
        uses: dict[str, set[str]] = {}
        for name, schema in components.items():
            direct[name], uses[name] = set(), set()
            for node in walk(schema):
                ref = node.schema.get("$ref")
                match = _COMPONENT.match(ref) if isinstance(ref, str) else None
                if match:
                    uses[name].add(_unescape(match.group(1)))
                for prop in (node.schema.get("properties") or {}).values():
                    for direction, flag in _HIDDEN_FLAG.items():
                        if self.flagged(prop, flag):
                            direct[name].add(direction)
        hides = {name: set(found) for name, found in direct.items()}
        changed = True
        while changed:  # to a fixpoint over the reference graph (cycles included)
            changed = False
            for name, used in uses.items():
                for other in used:
                    extra = hides.get(other, set()) - hides[name]
                    if extra:
                        hides[name] |= extra
                        changed = True
        return hides

    def flagged(self, schema: Any, flag: str) -> bool:
        """A property marked `flag` itself, or through the component its `$ref` names."""
        for _ in range(_MAX_REF_HOPS):
            if not isinstance(schema, dict):
                return False
            if schema.get(flag) is True:
                return True
            ref = schema.get("$ref")
            if not (isinstance(ref, str) and _COMPONENT.match(ref)):
                return False
            schema = self.lookup(ref)
        return False


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
            elif key == "allOf" and isinstance(value, list):
                out[key] = [
                    self._all_of_part(sub, child_pointer(where, i), expanding) for i, sub in enumerate(value)
                ]
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
        self._visibility(node, out)
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
        component = _COMPONENT.match(ref)
        if component:
            resolved: Any = {
                "$ref": DEFS_PREFIX + self.document.definition(_unescape(component.group(1)), self.direction)
            }
        elif ref in expanding:
            return self._cycle_stub(ref, target, pointer)
        elif self.expansions_left <= 0:
            self.log.warn(pointer, f"schema too large to inline: {ref} left unconstrained here")
            return {"description": f"A {ref.rsplit('/', 1)[-1]} (not expanded: the schema is too large)."}
        else:
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

    def _all_of_part(self, node: Any, pointer: str, expanding: tuple[str, ...]) -> Any:
        """A part of an `allOf`: a bare component reference opened in place (unless it is already being opened
        above: then it stays a reference), anything else converted as usual."""
        ref = node.get("$ref") if isinstance(node, dict) and set(node) == {"$ref"} else None
        target = self.document.lookup(ref) if isinstance(ref, str) and _COMPONENT.match(ref) else None
        if not isinstance(target, dict) or ref in expanding:
            return self.convert(node, pointer, expanding)
        return self.convert(target, ref, (*expanding, ref))

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

    def _visibility(self, node: dict[str, Any], out: dict[str, Any]) -> None:
        """Drop properties the agent never exchanges in this direction (readOnly in requests, writeOnly in
        responses) together with their `required` entries. Judged on the source property (a `$ref` to a flagged
        component counts), since a converted one may be a reference."""
        flag = _HIDDEN_FLAG[self.direction]
        properties = out.get("properties")
        source = node.get("properties")
        if not isinstance(properties, dict) or not isinstance(source, dict):
            return
        hidden = [n for n in properties if self.document.flagged(source.get(n), flag)]
        for name in hidden:
            del properties[name]
        if hidden and isinstance(out.get("required"), list):
            out["required"] = [n for n in out["required"] if n not in hidden]
            if not out["required"]:
                del out["required"]
