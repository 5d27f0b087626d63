"""Checks on a tool's JSON Schemas that the metaschema does not make: every `$ref` resolves, no `$ref` loops back
to itself without consuming part of the value (which would recurse forever at call time), and every keyword is
one JSON Schema 2020-12 knows (a typo or a YAML slip such as `{description: a, b.}` becomes an unknown keyword).

References are resolved with `referencing`, the library jsonschema itself uses; nothing is fetched, so a ref to
another file, a URL or a URN that the schema does not define is reported rather than failing later.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import jsonschema
import referencing
import referencing.exceptions
from referencing.jsonschema import DRAFT202012

Pointer = tuple[str | int, ...]

# Keywords whose subschemas apply to the same value (a ref cycle through only these never ends).
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas",)
# Keywords whose subschemas apply to a part of the value, or only hold definitions.
_CHILD_ONE = (
    "additionalProperties",
    "items",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
)
_CHILD_LIST = ("prefixItems",)
_CHILD_MAP = ("properties", "patternProperties", "$defs", "definitions")

ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$comment",
        "$defs",
        "$vocabulary",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    }
)
KNOWN_KEYWORDS = frozenset(jsonschema.Draft202012Validator.VALIDATORS) | ANNOTATIONS

DEFAULT_BASE = "urn:aw-mcp:schema"


@dataclass(frozen=True)
class SchemaNode:
    """A subschema, where it sits (a JSON pointer as path parts) and its base URI for resolving refs."""

    schema: dict[str, Any]
    pointer: Pointer
    base: str


def pointer_text(pointer: Pointer) -> str:
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in pointer)


def _children(node: SchemaNode) -> Iterator[tuple[Any, Pointer, bool]]:
    """(subschema, pointer, applies to the same value) for each subschema directly under `node`."""
    schema, here = node.schema, node.pointer
    for key in _IN_PLACE_ONE + _CHILD_ONE:
        if key in schema:
            yield schema[key], (*here, key), key in _IN_PLACE_ONE
    for key in _IN_PLACE_LIST + _CHILD_LIST:
        if isinstance(schema.get(key), list):
            for i, item in enumerate(schema[key]):
                yield item, (*here, key, i), key in _IN_PLACE_LIST
    for key in _IN_PLACE_MAP + _CHILD_MAP:
        if isinstance(schema.get(key), dict):
            for name, item in schema[key].items():
                yield item, (*here, key, name), key in _IN_PLACE_MAP
    if isinstance(schema.get("items"), list):  # the pre-2020 tuple form
        for i, item in enumerate(schema["items"]):
            yield item, (*here, "items", i), False


def walk(schema: Any) -> Iterator[SchemaNode]:
    """Every object subschema, depth first, each with its pointer and base URI (`$id` changes the base)."""
    if not isinstance(schema, dict):
        return
    stack = [SchemaNode(schema, (), DEFAULT_BASE)]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node.schema) in seen:  # YAML aliases may share one object
            continue
        seen.add(id(node.schema))
        ident = node.schema.get("$id")
        if isinstance(ident, str):
            node = SchemaNode(node.schema, node.pointer, urljoin(node.base, ident))
        yield node
        for child, pointer, _ in _children(node):
            if isinstance(child, dict):
                stack.append(SchemaNode(child, pointer, node.base))


def _registry(schema: dict[str, Any]) -> referencing.Registry[Any]:
    resource = DRAFT202012.create_resource(schema)
    return referencing.Registry().with_resource(DEFAULT_BASE, resource).crawl()  # type: ignore[no-any-return]


def ref_problem(schema: Any) -> str | None:
    """Why the schema's references are unusable (naming the `$ref` by its JSON pointer), or None."""
    if not isinstance(schema, dict):
        return None
    registry = _registry(schema)
    nodes = list(walk(schema))
    pointers = {id(n.schema): n.pointer for n in nodes}
    # Edges between subschemas applied to the same value: in-place applicators and references.
    edges: dict[int, list[tuple[int, Pointer]]] = {}
    for node in nodes:
        out = edges.setdefault(id(node.schema), [])
        for child, pointer, in_place in _children(node):
            if in_place and isinstance(child, dict):
                out.append((id(child), pointer))
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.schema.get(keyword)
            if ref is None:
                continue
            where = pointer_text((*node.pointer, keyword))
            if not isinstance(ref, str):
                return f"{keyword} at {where} must be a string"
            try:
                target = registry.resolver(node.base).lookup(ref)
            except referencing.exceptions.Unresolvable:
                return (
                    f"{keyword} {ref!r} at {where} cannot be resolved (only references inside this schema "
                    "work: `#/$defs/name`, `#`, an `$anchor`; other files and URLs are not fetched)"
                )
            if isinstance(target.contents, dict) and id(target.contents) in pointers:
                out.append((id(target.contents), (*node.pointer, keyword)))
    # A cycle made only of same-value edges recurses forever whatever the value is.
    state: dict[int, int] = {}
    for start in edges:
        if state.get(start):
            continue
        stack: list[tuple[int, Iterator[tuple[int, Pointer]]]] = [(start, iter(edges[start]))]
        state[start] = 1
        while stack:
            current, it = stack[-1]
            step = next(it, None)
            if step is None:
                state[current] = 2
                stack.pop()
                continue
            target_id, via = step
            if state.get(target_id) == 1:
                return (
                    f"the reference at {pointer_text(via)} loops back to {pointer_text(pointers[target_id])} "
                    "without descending into a property or item, so checking any value would never end"
                )
            if not state.get(target_id):
                state[target_id] = 1
                stack.append((target_id, iter(edges.get(target_id, ()))))
    return None


def keyword_problems(schema: Any) -> Iterator[tuple[Pointer, str, bool]]:
    """(pointer to the keyword, message, is_error): a keyword set to null is an error, an unknown one a warning."""
    for node in walk(schema):
        for key, value in node.schema.items():
            if isinstance(key, str) and key.startswith("x-"):
                continue
            where = (*node.pointer, key)
            if value is None:
                yield where, f"`{key}` has no value (null) at {pointer_text(where)}", True
            elif key not in KNOWN_KEYWORDS:
                yield (
                    where,
                    f"unknown JSON Schema keyword {key!r} at {pointer_text(node.pointer)} (a typo, or text after a "
                    "comma in a `{...}` flow mapping: quote such a description); use an `x-` prefix for your own",
                    False,
                )
