"""The one walker over JSON Schemas and JSON pointers: which keywords hold subschemas, every subschema with its
JSON pointer (`walk`, or `rebuild` for a transformed copy), and `$ref` resolution with `referencing`, the library
jsonschema itself resolves references with (so a reference resolves here exactly when it resolves at call time).

Used by the schema checks (schema_check.py: keywords, regexes, references, dangling refs), the grammar's
relaxation of an output schema (constrained.py), the grammar writer (grammar_text.py) and the OpenAPI importer
(importers/openapi_schema.py, whose documents are not schemas: `LocalRefs` resolves a pointer in any JSON).
Nothing is fetched: a reference to another file or URL is unresolvable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import referencing
import referencing.exceptions
from referencing.jsonschema import DRAFT202012

Pointer = tuple[str | int, ...]

DEFAULT_BASE = "urn:aw-mcp:schema"

# Keywords whose subschemas apply to the same value (a ref cycle through only these never ends).
IN_PLACE_ONE = ("not", "if", "then", "else")
IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
IN_PLACE_MAP = ("dependentSchemas",)
# Keywords whose subschemas apply to a part of the value, or only hold definitions.
CHILD_ONE = (
    "additionalProperties",
    "items",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
)
CHILD_LIST = ("prefixItems",)
CHILD_MAP = ("properties", "patternProperties", "$defs", "definitions")

SCHEMA_ONE = IN_PLACE_ONE + CHILD_ONE  # the keyword's value is one subschema
SCHEMA_LIST = IN_PLACE_LIST + CHILD_LIST  # a list of subschemas (and `items` in its pre-2020 tuple form)
SCHEMA_MAP = IN_PLACE_MAP + CHILD_MAP  # a map of names to subschemas


def pointer_text(pointer: Pointer) -> str:
    """`#/properties/a~1b`: the pointer as a URI fragment (RFC 6901 escaping)."""
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in pointer)


@dataclass(frozen=True)
class SchemaNode:
    """A subschema, where it sits (a JSON pointer as path parts) and its base URI for resolving refs."""

    schema: dict[str, Any]
    pointer: Pointer
    base: str


def children(node: SchemaNode) -> Iterator[tuple[Any, Pointer, bool]]:
    """(subschema, pointer, applies to the same value) for each subschema directly under `node`."""
    schema, here = node.schema, node.pointer
    for key in IN_PLACE_ONE + CHILD_ONE:
        if key in schema:
            yield schema[key], (*here, key), key in IN_PLACE_ONE
    for key in IN_PLACE_LIST + CHILD_LIST:
        if isinstance(schema.get(key), list):
            for i, item in enumerate(schema[key]):
                yield item, (*here, key, i), key in IN_PLACE_LIST
    for key in IN_PLACE_MAP + CHILD_MAP:
        if isinstance(schema.get(key), dict):
            for name, item in schema[key].items():
                yield item, (*here, key, name), key in IN_PLACE_MAP
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
        for child, pointer, _ in children(node):
            if isinstance(child, dict):
                stack.append(SchemaNode(child, pointer, node.base))


def _keep_everything(pointer: Pointer, value: Any, keyword: bool) -> bool:
    return False


def rebuild(
    schema: Any,
    finish: Callable[[dict[str, Any], Pointer], Any],
    drop: Callable[[Pointer, Any, bool], bool] = _keep_everything,
) -> Any:
    """A new schema, built bottom-up: each object subschema's keywords in their order, its subschemas (the
    keyword table above) rebuilt first, then `finish(node, pointer)` returns what replaces the node. `drop(pointer,
    value, keyword)` leaves out a keyword (`keyword` true) or a member of a subschema map before anything under it
    is visited. Values that are not subschemas (`enum`, `examples`, an `x-` extension, an unknown keyword) are kept
    as they are, not copied."""

    def build(node: Any, here: Pointer) -> Any:
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            at = (*here, key)
            if drop(at, value, True):
                continue
            if key in SCHEMA_MAP and isinstance(value, dict):
                out[key] = {
                    name: build(sub, (*at, name))
                    for name, sub in value.items()
                    if not drop((*at, name), sub, False)
                }
            elif (key in SCHEMA_LIST or key == "items") and isinstance(value, list):
                out[key] = [build(sub, (*at, i)) for i, sub in enumerate(value)]
            elif key in SCHEMA_ONE:
                out[key] = build(value, at)
            else:
                out[key] = value
        return finish(out, here)

    return build(schema, ())


# ---------------------------------------------------------------------------------------------------------------
# References, with `referencing`
# ---------------------------------------------------------------------------------------------------------------

# What a failed lookup raises: referencing's own error, or (a pointer that indexes a list with a word, or steps into
# a string or a number) the ValueError or TypeError its pointer walk lets through.
LOOKUP_ERRORS = (referencing.exceptions.Unresolvable, LookupError, ValueError, TypeError)


_NAMING_KEYWORDS = ("$id", "$anchor", "$dynamicAnchor")


def schema_registry(schema: dict[str, Any]) -> referencing.Registry[Any]:
    """The schema as a Draft 2020-12 resource at DEFAULT_BASE, crawled (its `$id`s and `$anchor`s known) when it
    has any: `referencing` crawls every path through shared subschemas (YAML aliases), 2^N for N levels, and a
    JSON pointer resolves without it."""
    resource = DRAFT202012.create_resource(schema)
    registry = referencing.Registry().with_resource(DEFAULT_BASE, resource)
    if any(key in node.schema for node in walk(schema) for key in _NAMING_KEYWORDS):
        registry = registry.crawl()
    return registry  # type: ignore[no-any-return]


def lookup(registry: referencing.Registry[Any], base: str, ref: str) -> Any:
    """What `ref` (as written at a node whose base URI is `base`) points at. Raises one of LOOKUP_ERRORS."""
    return registry.resolver(base).lookup(ref).contents


class DanglingRef(LookupError):
    """A local reference that points at nothing."""


class LocalRefs:
    """Local references (`#`, `#/a/b~1c`, percent-escapes allowed) in one JSON document, resolved as JSON pointers
    by `referencing` (the document is opaque: any JSON, e.g. an OpenAPI document, not only a schema)."""

    def __init__(self, document: Any) -> None:
        resource = referencing.Resource.opaque(document)
        self._resolver = referencing.Registry().with_resource(DEFAULT_BASE, resource).resolver(DEFAULT_BASE)

    def lookup(self, ref: str) -> Any:
        """The value `ref` points at. Raises DanglingRef when there is none (or `ref` is not local)."""
        if not ref.startswith("#"):
            raise DanglingRef(ref)
        try:
            return self._resolver.lookup(ref).contents
        except LOOKUP_ERRORS:
            raise DanglingRef(ref) from None

    def get(self, ref: str, default: Any = None) -> Any:
        try:
            return self.lookup(ref)
        except DanglingRef:
            return default
