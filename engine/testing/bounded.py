"""Caps that let a random model finish a constrained answer (tests and benchmarks of the tiny checkpoints)."""

from __future__ import annotations

from typing import Any

# Formats whose grammar has no length bound, as bounded patterns that still satisfy the format.
BOUNDED_FORMATS = {
    "email": "^[a-z0-9]{1,8}@[a-z0-9]{1,8}\\.com$",
    "idn-email": "^[a-z0-9]{1,8}@[a-z0-9]{1,8}\\.com$",
    "hostname": "^[a-z0-9]{1,8}\\.example\\.com$",
    "uri": "^https://[a-z0-9]{1,8}\\.example\\.com/[a-z0-9]{0,8}$",
    "uri-reference": "^/[a-z0-9]{0,8}$",
}


# A schema with an unbounded-length array and a length-capped string: the structured benchmarks' and tests' sample.
SAMPLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 12},
        "items": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 999},
            "maxItems": 50,
        },
        "ok": {"type": "boolean"},
    },
    "required": ["id", "items", "ok"],
}


def bounded(schema: Any) -> Any:
    """The schema with unbounded strings, numbers and arrays capped (8 characters, integers within +-10^6,
    2 items; an email, hostname or URI becomes a short pattern of that format). A random model ends a string only
    when it happens to pick `"` (about 1 in 300 tokens), and a number or an array just as rarely, so unbounded ones
    outrun any token budget; a real model ends them by meaning. A bounded answer is stricter, so it also validates
    against the original schema."""
    if isinstance(schema, list):
        return [bounded(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded(v) for k, v in schema.items()}
    if out.get("format") in BOUNDED_FORMATS and "pattern" not in out:
        out["pattern"] = BOUNDED_FORMATS[out.pop("format")]
    kind = out.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds and not {"maxLength", "enum", "format", "pattern"} & out.keys():
        out["maxLength"] = 8
    if "integer" in kinds or "number" in kinds:
        # the grammar bounds integers, not a float's digits: an integer is a valid number too
        integer = ["integer" if k == "number" else k for k in kinds]
        out["type"] = integer if isinstance(kind, list) else "integer"
        out.setdefault("minimum", -(10**6))
        out.setdefault("maximum", 10**6)
    if "array" in kinds and "maxItems" not in out:
        out["maxItems"] = 2
    return out
