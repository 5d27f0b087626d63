"""Which optional arguments a client may send as an explicit `null` and mean "left out": those whose own schema
has no null type. mcp-use sends null for every optional argument it leaves out; 54 of 232 calls were refused for
it. Treated as absent (ToolSpec.without_refused_nulls); a null the schema admits, a null for a required argument
and a nested null keep every check they had."""

from __future__ import annotations

from typing import Any

from aw_mcp.spec.schema_check import SchemaCheck


def refused_nulls(input_schema: dict[str, Any]) -> frozenset[str]:
    """The optional top-level properties of `input_schema` whose schema refuses null."""
    properties = input_schema.get("properties")
    if not isinstance(properties, dict):
        return frozenset()
    required = set(input_schema.get("required") or [])
    defs = {k: input_schema[k] for k in ("$defs", "definitions") if k in input_schema}  # `#/$defs/..` resolve
    refused = set()
    for name, schema in properties.items():
        if name in required or not isinstance(schema, dict):
            continue
        try:  # within a check's budget (spec/check_budget.py): this runs on the event loop, at a first call
            if SchemaCheck({**schema, **defs}).errors(None):
                refused.add(name)
        except Exception:  # noqa: BLE001 -- a schema too odd (or costly) to try alone: the full check decides
            continue
    return frozenset(refused)
