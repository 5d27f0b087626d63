"""Checks on a tool's JSON Schemas that the metaschema does not make: every `$ref` resolves, no `$ref` loops back
to itself without consuming part of the value (which would recurse forever at call time), and every keyword is
one JSON Schema 2020-12 knows (a typo or a YAML slip such as `{description: a, b.}` becomes an unknown keyword).

References are resolved with `referencing`, the library jsonschema itself uses, through the one schema walker
(schema_walk.py); nothing is fetched, so a ref to another file, a URL or a URN that the schema does not define is
reported rather than failing later.

Regular expressions (`pattern`, `patternProperties`, and `propertyNames` through its `pattern`) are matched by RE2,
whose time is linear in the text: jsonschema's own `re.search` backtracks, and `^(a+)+$` against 28 `a`s and a `!`
holds the event loop (and the GIL) for seconds, every session with it. A pattern RE2 cannot take (a backreference,
lookaround) is a load-time warning (`regex_problems`) and is matched by the `regex` package under a time budget when
that is installed, else not at all; a value it cannot decide in time passes. `schema_validator` is the one validator
every argument and answer check uses.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import re2
from jsonschema.exceptions import ValidationError

from aw_mcp.spec.check_budget import (
    CheckBudget,
    bounded,
    current_budget,
    format_,
    multiple_of,
    shared_subschemas,
    unique_items,
)
from aw_mcp.spec.schema_walk import (
    LOOKUP_ERRORS,
    Pointer,
    children,
    lookup,
    pointer_text,
    schema_registry,
    walk,
)

try:  # optional: a backtracking engine with a timeout, for the patterns RE2 cannot take
    import regex as _backtracking
except ImportError:  # pragma: no cover - it comes with the engine extra (transformers)
    _backtracking = None

log = logging.getLogger(__name__)

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


def dangling_ref(schema: Any) -> str | None:
    """The first local `$ref` (`#/...`) that points at nothing: jsonschema only notices one when a value reaches
    it, which would turn a later tool call into an internal error instead of an import-time warning."""
    if not isinstance(schema, dict):
        return None
    try:
        registry = schema_registry(schema)
        nodes = list(walk(schema))
    except Exception:  # noqa: BLE001 -- malformed beyond walking (an importer's raw input): validation says why
        return None
    for node in nodes:
        ref = node.schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            try:
                lookup(registry, node.base, ref)
            except Exception:  # noqa: BLE001 -- LOOKUP_ERRORS, or a malformed schema on the way: nothing there
                return ref
    return None


def ref_problem(schema: Any) -> str | None:
    """Why the schema's references are unusable (naming the `$ref` by its JSON pointer), or None."""
    if not isinstance(schema, dict):
        return None
    registry = schema_registry(schema)
    nodes = list(walk(schema))
    pointers = {id(n.schema): n.pointer for n in nodes}
    # Edges between subschemas applied to the same value: in-place applicators and references.
    edges: dict[int, list[tuple[int, Pointer]]] = {}
    for node in nodes:
        out = edges.setdefault(id(node.schema), [])
        for child, pointer, in_place in children(node):
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
                target = lookup(registry, node.base, ref)
            except LOOKUP_ERRORS:
                return (
                    f"{keyword} {ref!r} at {where} cannot be resolved (only references inside this schema "
                    "work: `#/$defs/name`, `#`, an `$anchor`; other files and URLs are not fetched)"
                )
            if not isinstance(target, dict | bool):  # e.g. `#/properties/a/enum`: every call would fail on it
                kind = {list: "an array", str: "a string", int: "a number", float: "a number"}.get(
                    type(target), "null"
                )
                return f"{keyword} {ref!r} at {where} points at {kind}, not a schema (an object or a boolean)"
            if isinstance(target, dict) and id(target) in pointers:
                out.append((id(target), (*node.pointer, keyword)))
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


_YAML_KINDS = {
    "date": "date",
    "datetime": "timestamp",
    "set": "set (`!!set`)",
    "tuple": "pair (`!!pairs` or `!!omap`)",
    "bytes": "binary value",
}


def json_problem(value: Any) -> str | None:
    """Where a value read from YAML stops being JSON, or None. A schema, an example or an argument goes over the
    wire as JSON: a key that is not text (`2026-01-01:`, `1:`), a YAML date, set or pair, or a NaN or infinite
    number has no JSON form (and a non-text key never matches a property an agent sends)."""
    stack: list[tuple[Any, Pointer]] = [(value, ())]
    while stack:
        node, here = stack.pop()
        if isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    kind = _YAML_KINDS.get(type(key).__name__, type(key).__name__)
                    return (
                        f"the key {str(key)!r} at {pointer_text(here)} is a YAML {kind}, not text: quote it"
                    )
                stack.append((item, (*here, key)))
        elif isinstance(node, list):
            stack.extend((item, (*here, i)) for i, item in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            return f"{node!r} at {pointer_text(here)} is not a JSON number"
        elif not isinstance(node, str | int | float | bool | None):
            kind = _YAML_KINDS.get(type(node).__name__, type(node).__name__)
            return f"the value at {pointer_text(here)} is a YAML {kind}, which JSON has no form for: quote it"
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


# ---------------------------------------------------------------------------------------------------------------
# Regular expressions in linear time
# ---------------------------------------------------------------------------------------------------------------

# The backtracking fallback (a pattern RE2 cannot take): one match, and all of one argument or answer check together
# (`regex_budget`). The `regex` package overruns a timeout by up to about 2x, so a check holds the loop <= ~0.1 s.
FALLBACK_MATCH_S = 0.02
FALLBACK_CHECK_S = 0.05

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a pattern it cannot take is reported by us, not printed by the C++ library
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_HEX8 = re.compile(r"[0-9A-Fa-f]{8}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("aw_regex_deadline", default=None)
_timed_out: set[str] = set()


def _re2_syntax(pattern: str) -> str:
    """The pattern in RE2's spelling of the escapes ECMA-262 and Python share: `\\uXXXX` (and Python's
    `\\UXXXXXXXX`) become `\\x{...}`, Python's end-of-text `\\Z` becomes `\\z`. Everything else is passed as is."""
    if "\\" not in pattern:
        return pattern
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] != "\\" or i + 1 == len(pattern):
            out.append(pattern[i])
            i += 1
            continue
        escape = pattern[i + 1]
        if escape == "u" and _HEX4.fullmatch(pattern, i + 2, i + 6):
            out.append(f"\\x{{{pattern[i + 2 : i + 6]}}}")
            i += 6
        elif escape == "U" and _HEX8.fullmatch(pattern, i + 2, i + 10):
            out.append(f"\\x{{{pattern[i + 2 : i + 10]}}}")
            i += 10
        else:
            out.append("\\z" if escape == "Z" else pattern[i : i + 2])
            i += 2
    return "".join(out)


@dataclass(frozen=True, eq=False)
class SafePattern:
    """A schema's regex, searched without ever backtracking without bound: by RE2 (`linear`), else by the
    `regex` package under a time budget (`fallback`), else not at all. `why`: why RE2 cannot take it."""

    source: str
    linear: Any = None
    fallback: Any = None
    why: str | None = None

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in `text` (JSON Schema patterns are not anchored). A match the
        fallback cannot decide within the budget, or a pattern nothing can run, counts as a match."""
        if self.linear is not None:
            try:
                return self.linear.search(text) is not None
            except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800"): RE2 matches UTF-8
                return self.linear.search(_SURROGATE.sub("\ufffd", text)) is not None
        if self.fallback is None:
            return True
        left = FALLBACK_MATCH_S
        deadline = _deadline.get()
        if deadline is not None:
            left = min(left, deadline - time.monotonic())
        if left <= 0:
            return True
        try:
            return self.fallback.search(text, timeout=left, concurrent=True) is not None
        except TimeoutError:
            if self.source not in _timed_out:
                _timed_out.add(self.source)
                log.warning(
                    "the regex %r did not decide a %d-character value within its time budget; the value passes "
                    "unchecked (further values may too)",
                    self.source,
                    len(text),
                )
            return True


@functools.lru_cache(maxsize=4096)
def safe_pattern(source: str) -> SafePattern:
    """The compiled form of one schema regex (cached: schemas are checked on every call)."""
    try:
        return SafePattern(source, linear=re2.compile(_re2_syntax(source), _RE2_OPTIONS))
    except (re2.error, UnicodeEncodeError) as exc:
        detail = exc.args[0] if exc.args else exc
        why = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
    fallback = None
    if _backtracking is not None:
        try:
            fallback = _backtracking.compile(source)
        except Exception:  # the regex package refuses it too: nothing can check it
            fallback = None
    return SafePattern(source, fallback=fallback, why=why)


@contextlib.contextmanager
def regex_budget(seconds: float = FALLBACK_CHECK_S) -> Iterator[None]:
    """Bound the time every fallback match inside the block may take together (the block must consume the
    validator's error iterator)."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def regex_problems(schema: Any) -> Iterator[tuple[Pointer, str]]:
    """(pointer to the regex, warning) for each `pattern` or `patternProperties` key that RE2 cannot take."""
    for node in walk(schema):
        found: list[tuple[Pointer, Any]] = [((*node.pointer, "pattern"), node.schema.get("pattern"))]
        patterns = node.schema.get("patternProperties")
        if isinstance(patterns, dict):
            found += [((*node.pointer, "patternProperties", key), key) for key in patterns]
        for where, source in found:
            if not isinstance(source, str) or (compiled := safe_pattern(source)).why is None:
                continue
            if compiled.fallback is not None:
                how = (
                    f"it is checked by backtracking with {FALLBACK_MATCH_S * 1000:.0f} ms per value, and a value "
                    "not decided in time passes"
                )
            else:
                how = (
                    "it is not checked (the `regex` package, when installed, checks it within a time budget)"
                )
            yield (
                where,
                f"the regex {source!r} at {pointer_text(where)} is not linear-time (RE2: {compiled.why}; "
                f"backreferences and lookaround need backtracking): {how}",
            )


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not safe_pattern(str(pattern)).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = safe_pattern(str(pattern))
        for key, value in instance.items():
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras_message(extras: list[Any]) -> tuple[str, str]:
    return ", ".join(repr(extra) for extra in extras), "was" if len(extras) == 1 else "were"


def _additional_properties(
    validator: Any, extra: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's `additionalProperties`, with patternProperties matched by `safe_pattern`."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = [safe_pattern(str(p)) for p in schema.get("patternProperties", {})]
    extras = {k for k in instance if k not in properties and not any(p.search(k) for p in patterns)}
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(map(str, schema["patternProperties"])))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            keys, verb = _extras_message(sorted(extras, key=str))
            yield ValidationError(f"Additional properties are not allowed ({keys} {verb} unexpected)")


def _no_errors(errors: Iterator[Any]) -> bool:
    return next(errors, None) is None


Own = Callable[[Any, Any, dict[str, Any]], set[Any]]


def _evaluated(own: Own, validator: Any, instance: Any, schema: Any) -> set[Any]:
    """The property names or item indexes of `instance` that `schema` evaluates (the annotations `unevaluated*`
    read, as jsonschema's `find_evaluated_*_by_schema` collect them): `own` gives a schema's own keywords' share,
    and those of its references, its `if`/`then`/`else` and its valid `allOf`/`anyOf`/`oneOf` branches are added.
    Once per (subschema, value) in a check (check_budget.py: a DAG of references is walked once, not per path)."""
    if validator.is_type(schema, "boolean") or not isinstance(schema, dict):
        return set()
    budget = current_budget()
    if budget is None or id(schema) not in budget.shared:
        return _collect(own, validator, instance, schema)
    key = (own.__name__, id(schema), id(instance), getattr(validator._resolver, "_base_uri", None))
    return budget.remember(  # type: ignore[no-any-return]
        key, lambda: _collect(own, validator, instance, schema), schema, instance
    )


def _collect(own: Own, validator: Any, instance: Any, schema: dict[str, Any]) -> set[Any]:
    found = own(validator, instance, schema)
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            here = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            found |= _evaluated(own, here, instance, resolved.contents)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            found |= _evaluated(own, validator, instance, schema["if"])
            if "then" in schema:
                found |= _evaluated(own, validator, instance, schema["then"])
        elif "else" in schema:
            found |= _evaluated(own, validator, instance, schema["else"])
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _no_errors(validator.descend(instance, subschema)):
                found |= _evaluated(own, validator, instance, subschema)
    return found


def _own_keys(validator: Any, instance: dict[str, Any], schema: dict[str, Any]) -> set[Any]:
    """A schema's own share of the evaluated property names, with patternProperties matched by `safe_pattern`."""
    keys: set[Any] = set()
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {k for k, v in instance.items() if _no_errors(validator.descend(v, subschema))}
    patterns = schema.get("patternProperties")
    if isinstance(patterns, dict):
        compiled = [safe_pattern(str(p)) for p in patterns]
        keys |= {k for k in instance if any(p.search(k) for p in compiled)}
    dependent = schema.get("dependentSchemas")
    if isinstance(dependent, dict):
        for name, subschema in dependent.items():
            if name in instance:
                keys |= _evaluated(_own_keys, validator, instance, subschema)
    return keys


def _unevaluated_properties(
    validator: Any, rest: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's `unevaluatedProperties`, on `_evaluated` property names."""
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated(_own_keys, validator, instance, schema)
    unevaluated = [
        key
        for key in instance
        if key not in evaluated
        and not _no_errors(validator.descend(instance[key], rest, path=key, schema_path=key))
    ]
    if unevaluated:
        if rest is False:
            keys, verb = _extras_message(sorted(unevaluated, key=str))
            yield ValidationError(f"Unevaluated properties are not allowed ({keys} {verb} unexpected)")
        else:
            keys, verb = _extras_message(unevaluated)
            yield ValidationError(
                f"Unevaluated properties are not valid under the given schema ({keys} {verb} unevaluated and "
                "invalid)"
            )


def _own_indexes(validator: Any, instance: list[Any], schema: dict[str, Any]) -> set[Any]:
    """A schema's own share of the evaluated item indexes."""
    if "items" in schema:
        return set(range(len(instance)))
    indexes: set[Any] = set()
    prefix = schema.get("prefixItems")
    if isinstance(prefix, list):
        indexes |= set(range(min(len(prefix), len(instance))))
    for keyword in ("contains", "unevaluatedItems"):
        if keyword in schema:
            check = validator.evolve(schema=schema[keyword])
            indexes |= {i for i, item in enumerate(instance) if check.is_valid(item)}
    return indexes


def _unevaluated_items(validator: Any, rest: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's `unevaluatedItems`, on `_evaluated` item indexes."""
    if not validator.is_type(instance, "array"):
        return
    evaluated = _evaluated(_own_indexes, validator, instance, schema)
    unevaluated = [
        item
        for index, item in enumerate(instance)
        if index not in evaluated and not _no_errors(validator.descend(item, rest, path=index))
    ]
    if unevaluated:
        items, verb = _extras_message(unevaluated)
        yield ValidationError(f"Unevaluated items are not allowed ({items} {verb} unexpected)")


# Draft 2020-12 with every keyword that matches a regex replaced (`propertyNames` reaches `pattern` itself), the
# quadratic or overflowing ones made linear and exact, and every keyword bounded by its check's budget.
_KEYWORDS = {
    **jsonschema.Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
    "unevaluatedItems": _unevaluated_items,
    "uniqueItems": unique_items,
    "multipleOf": multiple_of,
    "format": format_,
}
SafeValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={keyword: bounded(keyword, function) for keyword, function in _KEYWORDS.items()},
)


def schema_validator(schema: dict[str, Any]) -> Any:
    """The validator for every argument and answer check: Draft 2020-12, `format` checked (email, date-time,
    uri, ... as a real API would; a `regex` within bounds), regexes in linear time (or a bounded fallback)."""
    return SafeValidator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


class SchemaCheck:
    """One schema's validator, and its checks each within a budget (check_budget.py): every error of a value in
    bounded time, or CheckBudgetError naming the keyword the check was at."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.validator = schema_validator(schema)
        self.shared = shared_subschemas(schema)  # what a check memoizes (check_budget.py)

    def errors(self, instance: Any) -> list[ValidationError]:
        """Raises CheckBudgetError past the budget, RecursionError for a value nested too deeply."""
        with CheckBudget(shared=self.shared), regex_budget():
            return list(self.validator.iter_errors(instance))
