"""Constrained observations: the grammar a structured tool's answer is decoded under, so that it is valid by
construction rather than by retry.

What the world model may write for a tool with an `outputSchema` (`model.constrained: true`, the default):

- the result: one JSON value for the schema the model writes, i.e. `outputSchema` with its `outputWrapper`
  unwrapped (the API's own value; the simulator wraps it afterwards);
- or the JSON error body a real API returns, `{"error": {"status": 404, "code": "NOT_FOUND", "message": "..."}}`
  (or `{"error": "..."}`), which `looks_like_error` recognises by its leading `{"error":`;
- or, where the backend can express text (our engine), one plain-text line `Error: ...`, the shape the fault
  injector and the trained system prompt use for text errors.

The JSON part is `{"anyOf": [result schema, error body schema]}`, a plain JSON Schema any OpenAI-compatible server
takes as `response_format`. Our engine also frames it as the trained answer is framed (`**Environment
Observation:**` on its own line, or the `<predicted_observation>` tags of the screen domains), pretty-printed with
a 2-space indent like the trained observations, and adds the plain-text error line as a regex alternative.

Not every JSON Schema keyword can become a grammar. `relax` removes what the grammar engine (xgrammar, which vLLM
and SGLang use too) rejects or silently ignores, and names each removal; the world loader reports them as
warnings. The relaxed schema only shapes decoding: the answer is still validated against the full `outputSchema`
afterwards, and `model.output_retries` still applies.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema

from aw_mcp.core.model_io import AnswerConstraint
from aw_mcp.prompt.frame import observation_frame
from aw_mcp.spec.domains import TAGGED_DOMAINS
from aw_mcp.spec.schema_walk import Pointer, pointer_text, rebuild


class ToolOutput(Protocol):
    """What this module reads of a tool (world.ToolSpec has it; world.py imports this module, not the reverse)."""

    @property
    def name(self) -> str: ...
    @property
    def outputSchema(self) -> dict[str, Any] | None: ...
    @property
    def outputWrapper(self) -> str | None: ...


ERROR_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "status": {"type": "integer", "minimum": 100, "maximum": 599},
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "retry_after": {"type": "number", "minimum": 0},
                    },
                    "required": ["message"],
                    "additionalProperties": False,
                },
                {"type": "string"},
            ]
        }
    },
    "required": ["error"],
    "additionalProperties": False,
}
# One line of text; no control characters (a raw one would be invisible, and the answer ends at the line's end).
ERROR_TEXT_CHARS = 1000
# The trained observations' JSON layout (json.dumps(indent=2), as the demonstrations show it): every backend that
# decodes under a grammar pretty-prints the answer's JSON this way.
ANSWER_INDENT = 2
ERROR_TEXT_PREFIX = "Error: "


def error_text_regex(max_chars: int = ERROR_TEXT_CHARS) -> str:
    """`Error: ` and one line of up to `max_chars` characters (the prefix holds no regex metacharacter)."""
    return ERROR_TEXT_PREFIX + f"[^\\x00-\\x1f]{{1,{max_chars}}}"


# Keywords the grammar does not enforce (xgrammar 0.2: ignored or rejected). Dropping them changes nothing the
# grammar would have done, except that a schema it rejects compiles; post-hoc validation still checks them.
_DROPPED = {
    "not": "not enforced by the grammar",
    "if": "not enforced by the grammar",
    "then": "not enforced by the grammar",
    "else": "not enforced by the grammar",
    "dependentRequired": "not enforced by the grammar",
    "dependentSchemas": "not enforced by the grammar",
    "uniqueItems": "not enforced by the grammar",
    "contains": "not enforced by the grammar",
    "minContains": "not enforced by the grammar",
    "maxContains": "not enforced by the grammar",
    "unevaluatedItems": "not enforced by the grammar",
    "unevaluatedProperties": "not enforced by the grammar",
    "propertyNames": "the grammar would allow no keys at all",
    "$dynamicRef": "not resolved by the grammar",
}
# Formats the grammar writes correctly; a format the validator checks but the grammar does not know is dropped.
GRAMMAR_FORMATS = frozenset(
    {
        "date",
        "date-time",
        "time",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "uri-template",
        "uuid",
        "json-pointer",
    }
)
# Regex features the grammar's regex converter cannot take (lookaround, backreferences, Unicode classes).
_UNSUPPORTED_REGEX = re.compile(r"\(\?<?[=!]|\\[1-9]|\\k<|\(\?P=|\\[pP]\{")


# JSON Schema keywords that say nothing about the value (grammar_text.py skips them too).
ANNOTATIONS = frozenset(
    {"title", "description", "examples", "default", "$comment", "$schema", "$id", "$anchor", "deprecated"}
    | {"readOnly", "writeOnly", "contentMediaType", "contentEncoding", "nullable", "$defs", "definitions"}
)


@dataclass(frozen=True)
class Relaxation:
    """One keyword the grammar leaves to post-hoc validation: where (a JSON pointer into the schema) and why."""

    pointer: Pointer
    keyword: str
    why: str

    def __str__(self) -> str:
        return f"`{self.keyword}` at {pointer_text(self.pointer)}: {self.why}"


def _checked_formats() -> frozenset[str]:
    return frozenset(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)


def relax(schema: Any) -> tuple[Any, list[Relaxation]]:
    """A new schema that the grammar engine can take in full, and what was relaxed to get it (rebuilt by the one
    schema walker, schema_walk.rebuild: values that are not subschemas are shared with `schema`)."""
    notes: list[Relaxation] = []
    checked = _checked_formats()

    def drop(at: Pointer, value: Any, keyword: bool) -> bool:
        if keyword and at[-1] in _DROPPED:
            notes.append(Relaxation(at, str(at[-1]), _DROPPED[str(at[-1])]))
            return True
        if not keyword and value is False and at[-2] == "properties":  # the grammar rejects `false`
            notes.append(Relaxation(at, "false", "a property that must be absent is left out"))
            return True
        return False

    def finish(out: dict[str, Any], here: Pointer) -> dict[str, Any]:
        if isinstance(out.get("oneOf"), list):
            notes.append(
                Relaxation((*here, "oneOf"), "oneOf", "decoded as anyOf (exactly-one is not enforced)")
            )
            out["anyOf"] = out.pop("oneOf") + out.pop("anyOf", [])
        if "patternProperties" in out:
            patterns = out.pop("patternProperties")
            notes.append(
                Relaxation(
                    (*here, "patternProperties"),
                    "patternProperties",
                    "key patterns are not enforced; their value schemas apply to any extra key",
                )
            )
            extra = out.get("additionalProperties", True)
            values = (
                [v for v in patterns.values() if isinstance(v, dict | bool)]
                if isinstance(patterns, dict)
                else []
            )
            if extra is not False and extra is not True:
                values.append(extra)
            out["additionalProperties"] = {"anyOf": values} if values else True
        pattern = out.get("pattern")
        if isinstance(pattern, str) and _UNSUPPORTED_REGEX.search(pattern):
            out.pop("pattern")
            notes.append(
                Relaxation(
                    (*here, "pattern"),
                    "pattern",
                    f"the regex {pattern!r} uses lookaround, a backreference or a Unicode class",
                )
            )
        fmt = out.get("format")
        if isinstance(fmt, str) and fmt not in GRAMMAR_FORMATS and fmt in checked:
            out.pop("format")
            notes.append(
                Relaxation((*here, "format"), "format", f"format {fmt!r} is not written by the grammar")
            )
        ref = out.get("$ref")
        if isinstance(ref, str) and not (ref == "#" or ref.startswith("#/")):
            out.pop("$ref")
            notes.append(
                Relaxation((*here, "$ref"), "$ref", f"the grammar only follows `#/...` references ({ref!r})")
            )
        allof = out.get("allOf")
        if isinstance(allof, list) and allof:  # one schema too: its siblings would be lost beside it
            merged = _merge_all_of(allof)
            out.pop("allOf")
            if merged is None:
                notes.append(Relaxation((*here, "allOf"), "allOf", "only one of its schemas can be enforced"))
                out = {**allof[0], **out} if isinstance(allof[0], dict) else out
            else:
                combined = merge_schemas(out, merged)
                if combined is None:
                    notes.append(
                        Relaxation((*here, "allOf"), "allOf", "it disagrees with its own schema's keywords")
                    )
                out = combined or out
        return distribute_siblings(out, here, notes)

    return rebuild(schema, finish, drop), notes


def distribute_siblings(out: dict[str, Any], here: Pointer, notes: list[Relaxation]) -> dict[str, Any]:
    """`{properties: ..., anyOf: [A, B]}` as `{anyOf: [A + properties, B + properties]}`: xgrammar decodes an anyOf
    as its branches alone, dropping the keywords beside it (what an `allOf` of an object and an anyOf merges into).
    A branch that disagrees with them keeps its own (noted: validation afterwards has the full schema)."""
    branches = out.get("anyOf")
    siblings = {k: v for k, v in out.items() if k != "anyOf" and k not in ANNOTATIONS}
    if not isinstance(branches, list) or not siblings:
        return out
    spread = []
    for i, branch in enumerate(branches):
        if branch is True:
            branch = {}
        combined = merge_schemas(siblings, branch) if isinstance(branch, dict) else None
        if combined is None and branch is not False:
            notes.append(
                Relaxation((*here, "anyOf", i), "anyOf", "the branch disagrees with the keywords beside it")
            )
        spread.append(combined if combined is not None else branch)
    kept = {k: v for k, v in out.items() if k in ANNOTATIONS}
    return {**kept, "anyOf": spread}


def merge_schemas(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """Two object schemas as one (properties and required united), or None when they disagree on a keyword."""
    out = dict(a)
    for key, value in b.items():
        if key == "properties" and isinstance(value, dict):
            out["properties"] = {**out.get("properties", {}), **value}
        elif key == "required" and isinstance(value, list):
            out["required"] = list(dict.fromkeys([*out.get("required", []), *value]))
        elif key in out and out[key] != value:
            return None
        else:
            out[key] = value
    return out


def _merge_all_of(schemas: list[Any]) -> dict[str, Any] | None:
    merged: dict[str, Any] = {}
    for schema in schemas:
        if not isinstance(schema, dict) or "$ref" in schema or "allOf" in schema:
            return None
        result = merge_schemas(merged, schema)
        if result is None:
            return None
        merged = result
    return merged


def result_schema(output_schema: dict[str, Any], wrapper: str | None) -> dict[str, Any]:
    """The schema of the value the model writes: `outputSchema`, or its wrapped property with the root's `$defs`
    (references into them keep resolving)."""
    if wrapper is None:
        return output_schema
    inner = output_schema.get("properties", {}).get(wrapper, {})
    inner = dict(inner) if isinstance(inner, dict) else {}
    for key in ("$defs", "definitions"):
        if key in output_schema and key not in inner:
            inner[key] = output_schema[key]
    return inner


def answer_schema(result: dict[str, Any]) -> dict[str, Any]:
    """`{"anyOf": [result, error body]}`, the result's definitions hoisted to the root (where `#/$defs/..`
    points)."""
    result = dict(result)
    defs = {key: result.pop(key) for key in ("$defs", "definitions") if key in result}
    return {"anyOf": [result, ERROR_BODY_SCHEMA], **defs}


@dataclass(frozen=True)
class ToolGrammar:
    """A tool's constrained answer: the JSON Schema to decode under, and the relaxations made on the way (each a
    load-time warning). A schema the grammar engine still refuses is found by the backend that compiles it, which
    then decodes that tool unconstrained (one warning)."""

    schema: dict[str, Any] | None  # None: not constrained at all
    relaxations: tuple[Relaxation, ...]


_GRAMMARS: dict[str, ToolGrammar] = {}
MAX_CACHED = 4096


def tool_grammar(output_schema: dict[str, Any], wrapper: str | None) -> ToolGrammar:
    """The grammar schema of a tool's answers (cached by schema and wrapper)."""
    key = json.dumps([output_schema, wrapper], sort_keys=True, default=str)
    cached = _GRAMMARS.get(key)
    if cached is not None:
        return cached
    try:
        relaxed, notes = relax(result_schema(copy.deepcopy(output_schema), wrapper))
        grammar = ToolGrammar(answer_schema(relaxed), tuple(notes))
    except RecursionError:  # deeper than the world loader checks: decode free, validate afterwards
        grammar = ToolGrammar(None, (Relaxation((), "(schema)", "nested too deeply for a grammar"),))
    if len(_GRAMMARS) < MAX_CACHED:
        _GRAMMARS[key] = grammar
    return grammar


def answer_frame(domain: str) -> tuple[str, str]:
    """The text around the observation in the trained answer of this domain."""
    return observation_frame(tagged=domain in TAGGED_DOMAINS)


def constraint_for(tool: ToolOutput, domain: str) -> AnswerConstraint | None:
    """The constraint for one call of `tool` (a ToolSpec), or None when it has no output schema."""
    if tool.outputSchema is None:
        return None
    schema = tool_grammar(tool.outputSchema, tool.outputWrapper).schema
    if schema is None:
        return None
    prefix, suffix = answer_frame(domain)
    return AnswerConstraint(
        name=tool.name,
        json_schema=schema,
        prefix=prefix,
        suffix=suffix,
        text_alternative=error_text_regex(),
    )


def relaxation_warnings(tool: ToolOutput) -> list[tuple[Pointer, str]]:
    """(pointer into outputSchema, message) for each load-time warning about this tool's grammar."""
    if tool.outputSchema is None:
        return []
    base: Pointer = ("properties", tool.outputWrapper) if tool.outputWrapper else ()
    out = []
    for r in tool_grammar(tool.outputSchema, tool.outputWrapper).relaxations:
        where = (*base, *r.pointer)
        out.append(
            (
                where,
                f"constrained decoding cannot enforce `{r.keyword}` at {pointer_text(where)} ({r.why}): the "
                "grammar leaves it out, and the answer is still validated against the full outputSchema",
            )
        )
    return out
