"""The one JSON-Schema / JSON-pointer walker (aw_mcp/spec/schema_walk.py) that the schema checks, the grammar relaxation,
the grammar writer and the OpenAPI importer share."""

from __future__ import annotations

from typing import Any

import pytest

from aw_mcp.importers.import_log import ImportLog
from aw_mcp.importers.openapi_schema import OpenAPIDocument
from aw_mcp.prompt.constraint import relax
from aw_mcp.spec.schema_check import dangling_ref, ref_problem, schema_validator
from aw_mcp.spec.schema_walk import DEFAULT_BASE, DanglingRef, LocalRefs, Pointer, pointer_text, rebuild, walk

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a/b": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
    "$defs": {"item": {"$id": "https://example.com/item", "anyOf": [{"type": "string"}, {"type": "null"}]}},
    "enum": [{"not": {"type": "string"}}],  # a value, not a subschema
    "x-notes": {"properties": {"ignored": {}}},
}


def test_walk_visits_every_subschema_with_its_pointer_and_base() -> None:
    nodes = {pointer_text(n.pointer): n.base for n in walk(SCHEMA)}
    assert set(nodes) == {
        "#",
        "#/properties/a~1b",
        "#/properties/a~1b/items",
        "#/$defs/item",
        "#/$defs/item/anyOf/0",
        "#/$defs/item/anyOf/1",
    }
    assert nodes["#"] == DEFAULT_BASE and nodes["#/$defs/item/anyOf/0"] == "https://example.com/item"


def test_local_refs_resolve_json_pointers_in_any_document() -> None:
    document = {"paths": {"/pets/{id}": {"get": {"ok": 1}}}, "list": [10, 20], "a%b": "percent", "": "empty"}
    refs = LocalRefs(document)
    assert refs.lookup("#") is document
    assert refs.lookup("#/paths/~1pets~1%7Bid%7D/get/ok") == 1  # ~1 for "/", percent-escapes as in a URI
    assert refs.lookup("#/list/1") == 20
    assert refs.lookup("#/a%25b") == "percent"
    assert refs.lookup("#/") == "empty"  # RFC 6901: "/" names the key ""
    for missing in (
        "#/paths/nope",
        "#/list/2",
        "#/list/x",
        "#/list/1/deeper",
        "#anchor",
        "other.json#/paths",
    ):
        with pytest.raises(DanglingRef):
            refs.lookup(missing)
        assert refs.get(missing, "default") == "default"


def test_an_openapi_document_resolves_through_the_walker() -> None:
    document = OpenAPIDocument({"components": {"schemas": {"Pet": {"type": "object"}}}}, ImportLog())
    assert document.lookup("#/components/schemas/Pet") == {"type": "object"}
    assert document.lookup("#/components/schemas/Cat") is None


def test_rebuild_visits_keywords_in_order_children_first_and_leaves_values_alone() -> None:
    seen: list[str] = []

    def drop(at: Pointer, value: Any, keyword: bool) -> bool:
        return keyword and at[-1] == "title"

    def finish(node: dict[str, Any], here: Pointer) -> dict[str, Any]:
        seen.append(pointer_text(here))
        return {**node, "visited": True}

    schema = {"title": "x", "properties": {"a": {"title": "y"}}, "enum": [{"title": "kept"}], "not": {}}
    out = rebuild(schema, finish, drop)
    assert seen == ["#/properties/a", "#/not", "#"]
    assert out == {
        "properties": {"a": {"visited": True}},
        "enum": [{"title": "kept"}],
        "not": {"visited": True},
        "visited": True,
    }
    assert out["enum"] is schema["enum"]


def test_a_pattern_named_like_a_keyword_is_a_pattern() -> None:
    relaxed, notes = relax({"patternProperties": {"not": {"type": "integer"}}})
    assert relaxed == {"additionalProperties": {"anyOf": [{"type": "integer"}]}}
    assert [n.keyword for n in notes] == ["patternProperties"]


def test_dangling_refs_are_found_where_jsonschema_would_resolve_them() -> None:
    schema = {
        "type": "object",
        "$defs": {"a b": {"type": "string"}},
        "properties": {"x": {"$ref": "#/$defs/a%20b"}},
    }
    assert dangling_ref(schema) is None and ref_problem(schema) is None
    validator = schema_validator(schema)
    assert validator.is_valid({"x": "s"}) and not validator.is_valid({"x": 1})
    assert dangling_ref({**schema, "properties": {"x": {"$ref": "#/$defs/missing"}}}) == "#/$defs/missing"
    # A `$ref` inside a value (const, examples) is data, not a reference.
    assert dangling_ref({"type": "object", "const": {"$ref": "#/nowhere"}}) is None
    assert dangling_ref(["not a schema"]) is None
