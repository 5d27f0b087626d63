r"""The framed answer as grammar text, for OpenAI-compatible servers that take a grammar (vLLM, SGLang, llama.cpp).

Our engine composes the framed answer from xgrammar objects (engine/structured.py). A server takes a grammar as
text instead: vLLM and SGLang as xgrammar's EBNF, llama.cpp as GBNF. `framed_grammar` writes one text in the
syntax both read (rule names of letters, digits and hyphens; "..." literals and [...] classes whose special
characters are escaped as \\, \", \n or \uHHHH; ( ) | ? * + {m} {m,} {m,n}) for the answer the engine decodes:
the frame's prefix, then the JSON value or the plain-text error line, then the frame's suffix. The JSON's layout
is xgrammar's with `indent`: an object's or an array's members one per line, indented by depth; a free-form
value, an enum or a const compact on one line. Each repetition sits alone in its rule, on a rule or a single
character class, so that llama.cpp's limit on nested repetitions (2000 rules) is never reached by nesting.

A keyword the text cannot enforce exactly is left to the validation that follows every answer, and named in
`GrammarText.loosened`; a schema it cannot write at all (an unknown type, `false`, a reference it cannot resolve)
raises NotExpressible, and the backend sends that tool's JSON Schema instead.
"""

from __future__ import annotations

import json
import math
import re
import re._constants as _sre
import re._parser as _sre_parser
from dataclasses import dataclass
from typing import Any

from aw_mcp.core.model_io import AnswerConstraint
from aw_mcp.prompt.constraint import ANNOTATIONS as _ANNOTATIONS
from aw_mcp.prompt.constraint import MAX_CACHED, merge_schemas
from aw_mcp.spec.schema_walk import DanglingRef, LocalRefs


class NotExpressible(ValueError):
    """The constraint cannot be written as grammar text (the message says where and why)."""


@dataclass(frozen=True)
class GrammarText:
    """A framed answer's grammar as text (its start rule is `root`), and what it leaves to validation."""

    text: str
    loosened: tuple[str, ...]


_MAX_CODE_POINT = 0x10FFFF
_PRIMITIVE_PREFIXES = ("json-", "hex-", "fmt-")  # names of the shared rules
_SURROGATES = (0xD800, 0xDFFF)  # not characters: UTF-8 cannot encode them
# Where llama.cpp stops counting a repetition (`{m,n}` with a larger bound): a larger minimum is refused.
MAX_GRAMMAR_REPETITION = 2000
# ECMA-262 classes (JSON Schema patterns are ECMA regexes: \d is ASCII, unlike Python's).
_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))  # what `.` does not match
# Inside a JSON string a character is written raw unless JSON needs it escaped; these have a short escape.
_JSON_SHORT_ESCAPES = {
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}
_JSON_ESCAPED = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))

Intervals = tuple[tuple[int, int], ...]


def _normalise(intervals: Any) -> Intervals:
    """Sorted, merged, without surrogates."""
    out: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return _minus(tuple((lo, hi) for lo, hi in out), (_SURROGATES,), normalised=True)


def _minus(a: Intervals, b: Any, normalised: bool = False) -> Intervals:
    """The code points of `a` that are not in `b`."""
    out: list[tuple[int, int]] = []
    for lo, hi in a:
        pieces = [(lo, hi)]
        for b_lo, b_hi in b:
            pieces = [
                part
                for p_lo, p_hi in pieces
                for part in ((p_lo, min(p_hi, b_lo - 1)), (max(p_lo, b_hi + 1), p_hi))
                if part[0] <= part[1]
            ]
        out.extend(pieces)
    return tuple(out) if normalised else _normalise(out)


def _complement(a: Intervals) -> Intervals:
    return _minus(((0, _MAX_CODE_POINT),), a)


def _contains(a: Intervals, code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in a)


# Escapes both dialects read alike. Never \xHH: xgrammar reads every hex digit that follows (`"\x22e"` is one
# character), llama.cpp exactly two; \uHHHH and \UHHHHHHHH take exactly 4 and 8 digits in both.
_NAMED_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CLASS_ESCAPES = {**_NAMED_ESCAPES, "[": "\\[", "]": "\\]", "-": "\\-", "^": "\\u005E"}


def _escape_char(char: str, named: dict[str, str]) -> str:
    """One character of a literal or class: printable ASCII as itself, else an escape."""
    if char in named:
        return named[char]
    code = ord(char)
    if 0x20 <= code < 0x7F:
        return char
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def grammar_literal(text: str) -> str:
    """`text` as a grammar string literal."""
    return '"' + "".join(_escape_char(c, _NAMED_ESCAPES) for c in text) + '"'


def _class(intervals: Intervals) -> str:
    """A character class of these code points (its special characters escaped, so no order matters)."""
    parts = []
    for lo, hi in intervals:
        first = _escape_char(chr(lo), _CLASS_ESCAPES)
        parts.append(first if lo == hi else f"{first}-{_escape_char(chr(hi), _CLASS_ESCAPES)}")
    return "[" + "".join(parts) + "]"


def _repeat(atom: str, low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return f"{atom}*"
    if (low, high) == (1, None):
        return f"{atom}+"
    if (low, high) == (0, 1):
        return f"{atom}?"
    if high is None:
        return f"{atom}{{{low},}}"
    return f"{atom}{{{low}}}" if low == high else f"{atom}{{{low},{high}}}"


class _Unsupported(Exception):
    """A pattern the grammar cannot follow (the caller leaves it to validation)."""


class _GrammarWriter:
    """Writes the rules of one grammar; every method returns an atom (a rule name or a literal)."""

    def __init__(self, root: dict[str, Any], indent: int) -> None:
        self._pointers = LocalRefs(root)  # `#/...` references into the answer's schema
        self.indent = indent
        self.rules: dict[str, str] = {}
        self.loosened: list[str] = []
        self._by_body: dict[str, str] = {}
        self._refs: dict[str, str] = {}

    # --- rules -------------------------------------------------------------------------------------------------

    def reserve(self, hint: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-")[:40].strip("-") or "r"
        if not base[0].isalpha() or base.startswith(_PRIMITIVE_PREFIXES):
            base = "r-" + base
        name, n = base, 1
        while name in self.rules or name == "root":
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = ""
        return name

    def add(self, hint: str, body: str) -> str:
        """A rule with this body (an existing one when the body is the same)."""
        body = body.strip()
        name = self._by_body.get(body)
        if name is None:
            name = self.reserve(hint)
            self.rules[name] = body
            self._by_body[body] = name
        return name

    def loosen(self, where: str, keyword: str, why: str) -> None:
        self.loosened.append(f"`{keyword}` at {where or '/'}: {why}")

    def text(self, root_body: str) -> str:
        lines = [f"root ::= {root_body}"] + [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"

    # --- JSON primitives, xgrammar's (a string holds no raw control character) ----------------------------------

    def primitive(self, name: str) -> str:
        if name in self.rules:
            return name
        bodies = {
            "json-char": f'{_class(_minus(((0, _MAX_CODE_POINT),), _JSON_ESCAPED))} | "\\\\" json-escape',
            "json-escape": '[\\"/\\\\bfnrt] | "u" hex-digit hex-digit hex-digit hex-digit',
            "hex-digit": "[0-9a-fA-F]",
            "json-string": '"\\"" json-char* "\\""',
            "json-integer": '"0" | "-"? [1-9] [0-9]*',
            "json-number": '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?',
            "json-boolean": '"true" | "false"',
            "json-null": '"null"',
            "json-value": "json-object | json-array | json-string | json-number | json-boolean | json-null",
            "json-object": '"{" (json-member json-more-members*)? "}"',
            "json-member": 'json-string ": " json-value',
            "json-more-members": '", " json-member',
            "json-array": '"[" (json-value json-more-values*)? "]"',
            "json-more-values": '", " json-value',
        }
        self.rules[name] = bodies[name]
        for used in re.findall(r"\b(?:json|hex)-[a-z-]+\b", bodies[name]):
            self.primitive(used)
        return name

    # --- values ------------------------------------------------------------------------------------------------

    def value(self, schema: Any, depth: int, where: str) -> str:
        if schema is True or (isinstance(schema, dict) and not set(schema) - _ANNOTATIONS):
            return self.primitive("json-value")
        if not isinstance(schema, dict):
            raise NotExpressible(f"the schema at {where or '/'} admits no value")
        if "$ref" in schema:
            return self.reference(schema, depth, where)
        for combinator in ("allOf", "anyOf", "oneOf"):
            if isinstance(schema.get(combinator), list):
                return self.combination(schema, combinator, depth, where)
        if "const" in schema:
            return grammar_literal(_compact(schema["const"]))
        if "enum" in schema:
            values = schema["enum"] if isinstance(schema["enum"], list) else []
            if not values:
                raise NotExpressible(f"the enum at {where or '/'} is empty")
            return self.add("enum", " | ".join(dict.fromkeys(grammar_literal(_compact(v)) for v in values)))
        types = schema.get("type", _implied_type(schema))
        if types is None:
            return self.primitive("json-value")
        if isinstance(types, list):
            if not types:
                raise NotExpressible(f"the type list at {where or '/'} is empty")
            atoms = [self.typed(t, schema, depth, where) for t in types]
            return atoms[0] if len(atoms) == 1 else self.add("types", " | ".join(dict.fromkeys(atoms)))
        return self.typed(types, schema, depth, where)

    def typed(self, kind: Any, schema: dict[str, Any], depth: int, where: str) -> str:
        if kind == "string":
            return self.string(schema, where)
        if kind == "integer":
            return self.integer(schema, where)
        if kind == "number":
            return self.number(schema, where)
        if kind == "boolean":
            return self.primitive("json-boolean")
        if kind == "null":
            return self.primitive("json-null")
        if kind == "object":
            return self.object(schema, depth, where)
        if kind == "array":
            return self.array(schema, depth, where)
        raise NotExpressible(f"unknown type {kind!r} at {where or '/'}")

    def reference(self, schema: dict[str, Any], depth: int, where: str) -> str:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise NotExpressible(f"the reference {ref!r} at {where or '/'} is not into this schema")
        try:
            target = self._pointers.lookup(ref)
        except DanglingRef:
            raise NotExpressible(f"the reference {ref!r} points at nothing") from None
        siblings = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
        if siblings:
            merged = merge_schemas(target, siblings) if isinstance(target, dict) else None
            if merged is not None:
                return self.value(merged, depth, where)
            self.loosen(
                where, "$ref", "its sibling keywords disagree with the target; the target alone is used"
            )
        name = self._refs.get(ref)
        if name is None:
            # Written once, at the depth of its first use, as xgrammar does; reserved first for recursion.
            name = self._refs[ref] = self.reserve("ref-" + ref[2:])
            self.rules[name] = self.value(target, depth, ref[1:])
        return name

    def combination(self, schema: dict[str, Any], combinator: str, depth: int, where: str) -> str:
        rest = {k: v for k, v in schema.items() if k != combinator and k not in _ANNOTATIONS}
        branches = schema[combinator]
        if combinator == "allOf":
            return self.value(self.all_of(rest, branches, where), depth, where)
        atoms = []
        for i, branch in enumerate(branches):
            here = f"{where}/{combinator}/{i}"
            if rest and isinstance(branch, dict):
                combined = merge_schemas(rest, branch)
                if combined is None:
                    self.loosen(
                        here, combinator, "the branch disagrees with its parent's keywords; the branch wins"
                    )
                branch = combined if combined is not None else branch
            elif rest and branch is True:
                branch = rest
            if branch is False:
                continue
            atoms.append(self.value(branch, depth, here))
        if not atoms:
            raise NotExpressible(f"no branch of the {combinator} at {where or '/'} admits a value")
        unique = list(dict.fromkeys(atoms))
        return unique[0] if len(unique) == 1 else self.add("any-of", " | ".join(unique))

    def all_of(self, rest: dict[str, Any], branches: list[Any], where: str) -> Any:
        """One schema for all of them (relax merged what it could; what remains is merged the same way)."""
        if any(branch is False for branch in branches):
            return False
        merged: dict[str, Any] | None = rest
        for branch in branches:
            if isinstance(branch, dict) and merged is not None:
                merged = merge_schemas(merged, branch)
        if merged is None:
            self.loosen(where, "allOf", "its schemas disagree; only the first is enforced")
            first = next((b for b in branches if isinstance(b, dict)), {})
            merged = merge_schemas(rest, first) or first
        return merged

    # --- strings and numbers -----------------------------------------------------------------------------------

    def string(self, schema: dict[str, Any], where: str) -> str:
        quote = grammar_literal('"')
        fmt, pattern = schema.get("format"), schema.get("pattern")
        lengths = "minLength" in schema or "maxLength" in schema
        if isinstance(pattern, str):
            try:
                inner = _RegexWriter(self, in_json=True).search(pattern)
            except _Unsupported as why:
                self.loosen(where, "pattern", f"the grammar cannot follow {pattern!r} ({why})")
            else:
                if lengths or fmt:
                    self.loosen(where, "minLength/maxLength/format", "a pattern is enforced instead")
                return self.add("pattern", f"{quote} {inner} {quote}")
        if isinstance(fmt, str) and fmt in _FORMATS:
            if lengths:
                self.loosen(where, "minLength/maxLength", f"the format {fmt!r} is enforced instead")
            return self.add(f"format-{fmt}", f"{quote} {self.format_rule(fmt)} {quote}")
        if isinstance(fmt, str):
            self.loosen(where, "format", f"the grammar does not write {fmt!r}")
        low, high = _int_or(schema.get("minLength"), 0), _int_or(schema.get("maxLength"), None)
        if low == 0 and high is None:
            return self.primitive("json-string")
        if high is not None and low > high:
            raise NotExpressible(f"minLength is above maxLength at {where or '/'}")
        if low > MAX_GRAMMAR_REPETITION:
            self.loosen(where, "minLength", f"above {MAX_GRAMMAR_REPETITION} characters")
            low = MAX_GRAMMAR_REPETITION
        chars = self.add("chars", _repeat(self.primitive("json-char"), low, high))
        return self.add("string", f"{quote} {chars} {quote}")

    def format_rule(self, fmt: str) -> str:
        """The rule of a format (the format rules are written together: they use one another)."""
        for name, body in _FORMAT_PARTS:
            self.rules.setdefault(name, body)
        return f"fmt-{fmt}"

    def integer(self, schema: dict[str, Any], where: str) -> str:
        low, high = _integer_bounds(schema, self, where)
        if schema.get("multipleOf") not in (None, 1):
            self.loosen(where, "multipleOf", "not enforced by the grammar")
        if low is None and high is None:
            return self.primitive("json-integer")
        alternatives = _integer_range(low, high)
        if not alternatives:
            raise NotExpressible(f"no integer lies between the bounds at {where or '/'}")
        return self.add("integer-range", " | ".join(alternatives))

    def number(self, schema: dict[str, Any], where: str) -> str:
        """A number; of its bounds only the sign is enforced (a lower bound of 0 or more: no minus sign)."""
        keywords = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
        given = {
            k: schema[k] for k in keywords if isinstance(schema.get(k), int | float) and schema[k] is not True
        }
        non_negative = given.get("minimum", -1) >= 0 or given.get("exclusiveMinimum", -1) >= 0
        for keyword in given:
            if not (keyword == "minimum" and given[keyword] == 0):  # `minimum: 0` is the sign exactly
                self.loosen(where, keyword, "the grammar keeps only the sign of a number's bounds")
        if not non_negative:
            return self.primitive("json-number")
        return self.add("non-negative-number", '("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?')

    # --- objects and arrays ------------------------------------------------------------------------------------

    def object(self, schema: dict[str, Any], depth: int, where: str) -> str:
        properties = schema.get("properties")
        required = [r for r in schema.get("required", []) if isinstance(r, str)]
        extra = schema.get("additionalProperties")
        for keyword in ("minProperties", "maxProperties"):
            if keyword in schema:
                self.loosen(where, keyword, "not enforced by the grammar")
        if not isinstance(properties, dict) and not required and not isinstance(extra, dict):
            # Free-form, as xgrammar writes it: one line (nothing at all when additionalProperties is false).
            return '"{}"' if extra is False else self.primitive("json-object")
        properties = dict(properties or {})
        for name in required:
            properties.setdefault(name, True)
        # Strict, as xgrammar: no other key unless additionalProperties says which.
        inner = "\n" + " " * (self.indent * (depth + 1))
        members = [
            (
                self.add(
                    "member",
                    f"{grammar_literal(_compact(name))} {grammar_literal(': ')} "
                    f"{self.value(sub, depth + 1, f'{where}/properties/{name}')}",
                ),
                name in required,
            )
            for name, sub in properties.items()
        ]
        other = None
        if extra is not None and extra is not False:
            value = self.value(extra, depth + 1, f"{where}/additionalProperties")
            other = self.add("other-member", f"json-string {grammar_literal(': ')} {value}")
            self.primitive("json-string")
        first = self.sequence(members, other, grammar_literal("," + inner))
        close = grammar_literal("\n" + " " * (self.indent * depth) + "}")
        alternatives = [f"{grammar_literal('{' + inner)} {first} {close}"] if first else []
        if not any(needed for _, needed in members):
            alternatives.append('"{}"')
        return self.add("object", " | ".join(alternatives))

    def sequence(self, members: list[tuple[str, bool]], other: str | None, separator: str) -> str | None:
        """The members in order, each optional one maybe left out, then any number of `other`, separated:
        a rule, or None when nothing can be written."""
        # after[i]: members i.. each written after a separator (an optional one maybe not at all).
        after = [""] * (len(members) + 1)
        if other is not None:
            after[-1] = self.add("more-members", f"{separator} {other}") + "*"
        for i in range(len(members) - 1, 0, -1):
            member, needed = members[i]
            step = f"{separator} {member}" if needed else f"({separator} {member})?"
            after[i] = self.add("members-after", _sequence(step, after[i + 1]))
        # The first member written: an optional one before the first required one, the first required one, or
        # (when every member is optional) one of `other`.
        firsts = []
        for i, (member, needed) in enumerate(members):
            firsts.append(self.add("members", _sequence(member, after[i + 1])))
            if needed:
                break
        else:
            if other is not None:
                firsts.append(self.add("members", _sequence(other, after[-1])))
        if not firsts:
            return None
        return firsts[0] if len(firsts) == 1 else self.add("members", " | ".join(firsts))

    def array(self, schema: dict[str, Any], depth: int, where: str) -> str:
        items, prefix = schema.get("items"), schema.get("prefixItems")
        low, high = _int_or(schema.get("minItems"), 0), _int_or(schema.get("maxItems"), None)
        if items is None and not isinstance(prefix, list):
            if low or high is not None:
                self.loosen(where, "minItems/maxItems", "a free-form array's length is not enforced")
            return self.primitive("json-array")  # free-form, as xgrammar writes it
        inner = "\n" + " " * (self.indent * (depth + 1))
        open_, separator = grammar_literal("[" + inner), grammar_literal("," + inner)
        close = grammar_literal("\n" + " " * (self.indent * depth) + "]")
        if high is not None and low > high:
            raise NotExpressible(f"minItems is above maxItems at {where or '/'}")
        item = None if items is False or items is None else self.value(items, depth + 1, f"{where}/items")
        if isinstance(prefix, list) and prefix:
            return self.tuple_array(prefix, item, (low, high), (open_, separator, close), depth, where)
        if item is None or high == 0:
            return '"[]"'
        if low > MAX_GRAMMAR_REPETITION:
            self.loosen(where, "minItems", f"above {MAX_GRAMMAR_REPETITION} items")
            low = MAX_GRAMMAR_REPETITION
        more = self.add("more-items", f"{separator} {item}")
        rest = "" if high == 1 else _repeat(more, max(low - 1, 0), None if high is None else high - 1)
        alternatives = [_sequence(open_, item, rest, close)]
        if low == 0:
            alternatives.append('"[]"')
        return self.add("array", " | ".join(alternatives))

    def tuple_array(
        self,
        prefix: list[Any],
        item: str | None,
        counts: tuple[int, int | None],
        frame: tuple[str, str, str],
        depth: int,
        where: str,
    ) -> str:
        """prefixItems, each in its place (the first minItems of them required), then `items` if given."""
        low, high = counts
        open_, separator, close = frame
        counted_beyond = high is not None and (item is not None or high < len(prefix)) or low > len(prefix)
        if counted_beyond:
            self.loosen(where, "minItems/maxItems", "not enforced beyond prefixItems")
        atoms = [self.value(p, depth + 1, f"{where}/prefixItems/{i}") for i, p in enumerate(prefix)]
        chain = self.add("more-items", f"{separator} {item}") + "*" if item is not None else ""
        for i in range(len(atoms) - 1, 0, -1):
            step = _sequence(separator, atoms[i], chain)
            chain = self.add("items", step) if i < low else self.add("items", f"({step})?")
        alternatives = [_sequence(open_, atoms[0], chain, close)]
        if low == 0:
            alternatives.append('"[]"')
        return self.add("tuple", " | ".join(alternatives))


def _sequence(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def _compact(value: Any) -> str:
    """A JSON value as xgrammar writes a const or enum: one line, no spaces."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _implied_type(schema: dict[str, Any]) -> str | None:
    """The type a schema without `type` describes by its keywords (xgrammar reads them the same way)."""
    if {"properties", "required", "additionalProperties"} & set(schema):
        return "object"
    if {"items", "prefixItems", "minItems", "maxItems"} & set(schema):
        return "array"
    if {"minLength", "maxLength", "pattern", "format"} & set(schema):
        return "string"
    if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} & set(schema):
        return "number"
    return None


def _int_or(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


# Formats the grammar writes, as xgrammar does (RFC 3339 dates and times, RFC 4122 UUIDs).
_FORMAT_PARTS = (
    ("fmt-date", '[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [01])'),
    (
        "fmt-time",
        '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" ([0-5] [0-9] | "60") fmt-fraction? '
        '("Z" | [-+] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])',
    ),
    ("fmt-fraction", '"." [0-9]+'),
    ("fmt-date-time", 'fmt-date "T" fmt-time'),
    ("fmt-uuid", 'fmt-hex8 "-" fmt-hex4 "-" fmt-hex4 "-" fmt-hex4 "-" fmt-hex8 fmt-hex4'),
    ("fmt-hex8", "[0-9a-fA-F]{8}"),
    ("fmt-hex4", "[0-9a-fA-F]{4}"),
)
_FORMATS = frozenset({"date", "time", "date-time", "uuid"})
_MAX_BOUND_DIGITS = 18  # a longer bound is left to validation (it would take hundreds of alternatives)


def _integer_bounds(
    schema: dict[str, Any], writer: _GrammarWriter, where: str
) -> tuple[int | None, int | None]:
    """The inclusive integer bounds a schema sets (exclusive ones and fractional ones rounded inwards)."""

    def number(key: str) -> float | None:
        value = schema.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    low = high = None
    if (minimum := number("minimum")) is not None:
        low = math.ceil(minimum)
    if (above := number("exclusiveMinimum")) is not None:
        low = max(low if low is not None else -math.inf, math.floor(above) + 1)
    if (maximum := number("maximum")) is not None:
        high = math.floor(maximum)
    if (below := number("exclusiveMaximum")) is not None:
        high = min(high if high is not None else math.inf, math.ceil(below) - 1)
    bounds = []
    for keyword, bound in (("minimum", low), ("maximum", high)):
        if bound is not None and len(str(abs(int(bound)))) > _MAX_BOUND_DIGITS:
            writer.loosen(where, keyword, f"a bound of more than {_MAX_BOUND_DIGITS} digits")
            bound = None
        bounds.append(None if bound is None else int(bound))
    return bounds[0], bounds[1]


def _integer_range(low: int | None, high: int | None) -> list[str]:
    """Grammar alternatives for the decimal integers from `low` to `high` (None: unbounded), as JSON writes
    them (no leading zeros, no `-0`)."""
    alternatives = []
    if high is None or high >= 0:
        alternatives += _non_negative_range(max(low, 0) if low is not None else 0, high)
    if low is None or low < 0:
        # -n for n from max(1, -high) to -low.
        top = None if low is None else -low
        negative = _non_negative_range(max(1, -high) if high is not None and high < 0 else 1, top)
        alternatives += [f'"-" {alternative}' for alternative in negative]
    return alternatives


def _non_negative_range(low: int, high: int | None) -> list[str]:
    if high is not None and high < low:
        return []
    alternatives = ['"0"'] if low == 0 else []
    low = max(low, 1)
    if high is not None and high < low:
        return alternatives
    shortest = len(str(low))
    longest = len(str(high)) if high is not None else shortest
    for digits in range(shortest, longest + 1):
        start = str(low) if digits == shortest else "1" + "0" * (digits - 1)
        end = str(high) if high is not None and digits == longest else "9" * digits
        alternatives += _same_length_range(start, end)
    if high is None:
        alternatives.append(f"[1-9] [0-9]{{{shortest},}}")  # every longer number
    return alternatives


def _same_length_range(start: str, end: str) -> list[str]:
    """Alternatives for the numbers from `start` to `end`, two digit strings of one length."""
    rest = len(start) - 1
    if start[1:] == "0" * rest and end[1:] == "9" * rest:
        head = f'"{start[0]}"' if start[0] == end[0] else f"[{start[0]}-{end[0]}]"
        return [f"{head} [0-9]{{{rest}}}" if rest else head]
    if start[0] == end[0]:
        return [f'"{start[0]}" {tail}' for tail in _same_length_range(start[1:], end[1:])]
    out = [f'"{start[0]}" {tail}' for tail in _same_length_range(start[1:], "9" * rest)]
    if int(start[0]) + 1 <= int(end[0]) - 1:
        middle = f"[{int(start[0]) + 1}-{int(end[0]) - 1}]"
        out.append(f"{middle} [0-9]{{{rest}}}")
    out += [f'"{end[0]}" {tail}' for tail in _same_length_range("0" * rest, end[1:])]
    return out


class _RegexWriter:
    """A regular expression as grammar rules, parsed with Python's own parser and read with ECMA-262's meaning
    (JSON Schema's): the raw text it matches in full, or (`in_json`) the same characters as a JSON string writes
    them, with JSON Schema's search semantics."""

    def __init__(self, writer: _GrammarWriter, in_json: bool) -> None:
        self.writer = writer
        self.in_json = in_json

    def full(self, pattern: str) -> str:
        """A rule for the strings the pattern matches from start to end."""
        return self.writer.add("regex", self.alternatives(self.parse(pattern), anchored=True))

    def search(self, pattern: str) -> str:
        """A rule for the strings holding a match: a side the pattern does not anchor may hold more text."""
        return self.writer.add("pattern", self.alternatives(self.parse(pattern), anchored=False))

    def parse(self, pattern: str) -> Any:
        try:
            parsed = _sre_parser.parse(pattern)
        except re.error as error:
            raise _Unsupported(f"not a regular expression: {error}") from None
        if parsed.state.flags & ~(re.UNICODE | re.VERBOSE):
            raise _Unsupported("flags change its meaning")
        return parsed

    def alternatives(self, parsed: Any, anchored: bool) -> str:
        items = list(parsed)
        if len(items) == 1 and items[0][0] is _sre.BRANCH:
            branches = items[0][1][1]
        else:
            branches = [items]
        return " | ".join(self.branch(list(branch), anchored) for branch in branches)

    def branch(self, items: list[Any], anchored: bool) -> str:
        at_start = bool(items) and items[0] in _STARTS
        at_end = bool(items) and items[-1] in _ENDS
        body = self.sequence(items[int(at_start) : len(items) - int(at_end)])
        if not anchored:
            anything = self.writer.primitive("json-char") + "*"
            body = _sequence("" if at_start else anything, body, "" if at_end else anything)
        return body or '""'

    def sequence(self, items: list[Any]) -> str:
        atoms: list[str] = []
        run: list[int] = []  # consecutive literal characters, written as one literal
        for op, av in items:
            if op is _sre.LITERAL:
                run.append(av)
                continue
            if run:
                atoms.append(self.literal(run))
                run = []
            atoms.append(self.node(op, av))
        if run:
            atoms.append(self.literal(run))
        return " ".join(atoms)

    def node(self, op: Any, av: Any) -> str:
        if op is _sre.NOT_LITERAL:
            return self.characters(_complement(((av, av),)))
        if op is _sre.ANY:
            return self.characters(_complement(_LINE_TERMINATORS))
        if op is _sre.IN:
            return self.characters(self.char_set(av))
        if op is _sre.BRANCH:
            return self.writer.add("regex-or", " | ".join(self.sequence(list(b)) or '""' for b in av[1]))
        if op is _sre.SUBPATTERN:
            _group, add_flags, del_flags, inner = av
            if (add_flags | del_flags) & ~(re.UNICODE | re.VERBOSE):
                raise _Unsupported("flags change its meaning")
            return self.writer.add("regex-group", self.sequence(list(inner)) or '""')
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT):
            low, high, inner = av
            if low > MAX_GRAMMAR_REPETITION:
                raise _Unsupported(f"a repetition of more than {MAX_GRAMMAR_REPETITION}")
            atom = self.writer.add("regex-part", self.sequence(list(inner)) or '""')
            return self.writer.add(
                "regex-repeat", _repeat(atom, low, None if high == _sre.MAXREPEAT else high)
            )
        raise _Unsupported(f"{str(op).lower()} has no grammar equivalent")

    def char_set(self, items: list[Any]) -> Intervals:
        negate = bool(items) and items[0][0] is _sre.NEGATE
        chosen: list[tuple[int, int]] = []
        for op, av in items[int(negate) :]:
            if op is _sre.LITERAL:
                chosen.append((av, av))
            elif op is _sre.RANGE:
                chosen.append(av)
            elif op is _sre.CATEGORY:
                chosen += _category(av)
            else:
                raise _Unsupported(f"{str(op).lower()} in a character class")
        chosen_set = _normalise(chosen)
        return _complement(chosen_set) if negate else chosen_set

    def literal(self, codes: list[int]) -> str:
        text = "".join(chr(c) for c in codes)
        if self.in_json:
            text = json.dumps(text, ensure_ascii=False)[1:-1]
        return grammar_literal(text)

    def characters(self, intervals: Intervals) -> str:
        """One character from the set: a class, plus (in a JSON string) the escapes of those JSON escapes."""
        if not self.in_json:
            if not _normalise(intervals):
                raise _Unsupported("an empty character class")
            return _class(_normalise(intervals))
        plain = _minus(intervals, _JSON_ESCAPED)
        atoms = [_class(plain)] if plain else []
        atoms += [grammar_literal(e) for code, e in _JSON_SHORT_ESCAPES.items() if _contains(intervals, code)]
        if not atoms:
            raise _Unsupported("a character class JSON cannot write")
        return atoms[0] if len(atoms) == 1 else self.writer.add("regex-char", " | ".join(atoms))


_STARTS = ((_sre.AT, _sre.AT_BEGINNING), (_sre.AT, _sre.AT_BEGINNING_STRING))
_ENDS = ((_sre.AT, _sre.AT_END), (_sre.AT, _sre.AT_END_STRING))


def _category(category: Any) -> list[tuple[int, int]]:
    classes = {
        _sre.CATEGORY_DIGIT: _DIGIT,
        _sre.CATEGORY_WORD: _WORD,
        _sre.CATEGORY_SPACE: _SPACE,
    }
    negated = {
        _sre.CATEGORY_NOT_DIGIT: _DIGIT,
        _sre.CATEGORY_NOT_WORD: _WORD,
        _sre.CATEGORY_NOT_SPACE: _SPACE,
    }
    if category in classes:
        return list(classes[category])
    if category in negated:
        return list(_complement(_normalise(negated[category])))
    raise _Unsupported(f"{str(category).lower()} has no grammar equivalent")


_GRAMMAR_TEXTS: dict[str, GrammarText | str] = {}  # a NotExpressible's message when it raised


def framed_grammar(constraint: AnswerConstraint, indent: int) -> GrammarText:
    """The grammar text of a constrained answer: `prefix`, then the JSON value for `json_schema` (its objects and
    arrays indented by `indent`) or the `text_alternative` line, then `suffix`. Cached; raises NotExpressible."""
    key = json.dumps(
        [constraint.json_schema, constraint.prefix, constraint.suffix, constraint.text_alternative, indent],
        default=str,
    )
    cached = _GRAMMAR_TEXTS.get(key)
    if cached is None:
        try:
            cached = _write_framed_grammar(constraint, indent)
        except NotExpressible as why:
            cached = str(why)
        except RecursionError:
            cached = "the schema is nested too deeply"
        if len(_GRAMMAR_TEXTS) < MAX_CACHED:
            _GRAMMAR_TEXTS[key] = cached
    if isinstance(cached, str):
        raise NotExpressible(cached)
    return cached


def _write_framed_grammar(constraint: AnswerConstraint, indent: int) -> GrammarText:
    writer = _GrammarWriter(constraint.json_schema, indent)
    answer = writer.value(constraint.json_schema, 0, "")
    if constraint.text_alternative is not None:
        try:
            text = _RegexWriter(writer, in_json=False).full(constraint.text_alternative)
        except _Unsupported as why:
            raise NotExpressible(f"the text alternative {constraint.text_alternative!r}: {why}") from None
        answer = writer.add("answer", f"{answer} | {text}")
    parts = [grammar_literal(constraint.prefix) if constraint.prefix else "", answer]
    parts.append(grammar_literal(constraint.suffix) if constraint.suffix else "")
    return GrammarText(writer.text(" ".join(p for p in parts if p)), tuple(dict.fromkeys(writer.loosened)))
