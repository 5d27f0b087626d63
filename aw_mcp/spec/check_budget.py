"""Every schema check (a call's arguments, a model's answer, a world file's examples) runs in bounded time.

jsonschema walks a schema once per path through it: `allOf`/`anyOf`/`oneOf` branches that point twice at the next
`$defs` entry make 2^N walks of N levels (18 levels held every session 16 s), and its `uniqueItems` compares every
pair of items. Here each check gets a `CheckBudget` (a context manager):

- a subschema is applied to a value once: what `descend` (and `$ref`, `is_valid`) returns for (subschema, value,
  base URI) is memoized for the check, so a DAG of references costs its size, not its number of paths. A memoized
  error is handed out as a copy with its own path, as jsonschema would have built it (contexts are shared, so
  their errors' parents are not: `best_problem` computes the path of a nested error itself). A schema with a
  `$dynamicRef` depends on the path it was reached by and is not memoized (the budget still bounds it);
- every keyword evaluation is a step: past MAX_CHECK_STEPS, or past the check's deadline (both much smaller for a
  check on an event loop), the check stops with `CheckBudgetError` naming the keyword it was at, which the caller
  turns into one clear error;
- `uniqueItems` hashes each item's canonical JSON form (linear); `multipleOf` falls back to exact fractions where
  floats overflow (an `Infinity` never gets here: arguments must be JSON numbers); a `format: regex` value is
  parsed by RE2 (linear) or, for the backreferences and lookaround RE2 lacks, by Python's parser, and only up to
  MAX_REGEX_FORMAT_CHARS (Python's `re` held the loop 18 s on a 4 MB alternation and overflowed on `a{4294967296}`).

Any other exception a keyword raises is reported as that keyword's failure to check the value, never as an
internal error of the call.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import Any

import jsonschema
import re2
from jsonschema import _keywords
from jsonschema.exceptions import ValidationError, relevance

from aw_mcp.spec.schema_walk import children, lookup, schema_registry, walk

# Keyword evaluations and wall time for one check. On an event loop (a small answer, checked inline) it must stay
# short: every session waits meanwhile. Elsewhere (a worker thread: arguments, big answers; a world file's examples
# at load) a 2.4 MB answer of 60,000 objects takes ~1,000,000 steps and seconds on a loaded machine.
MAX_CHECK_STEPS = 20_000_000
CHECK_SECONDS = 30.0
MAX_CHECK_STEPS_ON_LOOP = 200_000  # a 64 KB answer takes ~40,000
CHECK_SECONDS_ON_LOOP = 0.5
MAX_REGEX_FORMAT_CHARS = 32_768  # a `format: regex` value longer than this is refused, not compiled
_TIME_EVERY = 1024  # steps between two looks at the clock
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


class CheckBudgetError(Exception):
    """A check ran out of its budget (steps or time) while evaluating `keyword`."""

    def __init__(self, keyword: str, why: str) -> None:
        super().__init__(f"{why} at the keyword `{keyword}`")
        self.keyword = keyword
        self.why = why


class CheckBudget:
    """The memo and the counters of one check; `with CheckBudget(...):` makes it the current check."""

    def __init__(
        self, steps: int | None = None, seconds: float | None = None, shared: frozenset[int] = frozenset()
    ) -> None:
        on_loop = _on_event_loop()
        self.steps = steps if steps is not None else (MAX_CHECK_STEPS_ON_LOOP if on_loop else MAX_CHECK_STEPS)
        self.steps_left = self.steps
        self.seconds = (
            seconds if seconds is not None else (CHECK_SECONDS_ON_LOOP if on_loop else CHECK_SECONDS)
        )
        self.deadline = 0.0
        self.shared = shared  # the subschemas whose results are memoized (`shared_subschemas`)
        self.memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._token: contextvars.Token[CheckBudget | None] | None = None

    def __enter__(self) -> CheckBudget:
        self.deadline = time.monotonic() + self.seconds
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _CURRENT.reset(self._token)
        self.memo.clear()

    def step(self, keyword: str) -> None:
        self.steps_left -= 1
        if self.steps_left % _TIME_EVERY == 0:
            if self.steps_left <= 0:
                raise CheckBudgetError(keyword, f"the check took more than {self.steps:,} steps")
            if time.monotonic() > self.deadline:
                raise CheckBudgetError(keyword, f"the check took more than {self.seconds:g} s")

    def remember(self, key: tuple[Any, ...], compute: Callable[[], Any], *alive: Any) -> Any:
        """`compute()`, once per key in this check. `alive`: the objects whose ids are in the key, kept until the
        check ends so that no id is reused by another object meanwhile."""
        hit = self.memo.get(key)
        if hit is not None:
            return hit[0]
        value = compute()
        self.memo[key] = (value, alive)
        return value


_CURRENT: contextvars.ContextVar[CheckBudget | None] = contextvars.ContextVar("aw_check_budget", default=None)


def _on_event_loop() -> bool:
    """Whether this thread runs an event loop (a worker thread of `anyio.to_thread` does not)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def current_budget() -> CheckBudget | None:
    return _CURRENT.get()


def _base_uri(resolver: Any) -> Any:
    return getattr(resolver, "_base_uri", None)


def _origin(error: ValidationError) -> ValidationError:
    return error.__dict__.get("_aw_origin", error)  # type: ignore[no-any-return]


def _distinct(errors: Iterable[ValidationError]) -> list[ValidationError]:
    """One error per (memoized error it copies, value path): `allOf` branches reaching one subschema twice report
    its errors once, not once per path (2^N copies of one error for N levels)."""
    seen: set[tuple[int, tuple[Any, ...]]] = set()
    out = []
    for error in errors:
        key = (id(_origin(error)), tuple(error.relative_path))
        if key not in seen:
            seen.add(key)
            out.append(error)
    return out


def _replayed(error: ValidationError, path: Any, schema_path: Any) -> ValidationError:
    """A copy of a memoized error as `descend(path=, schema_path=)` hands it out (the original stays untouched)."""
    copy = error.__class__.__new__(error.__class__)
    copy.__dict__.update(error.__dict__)
    copy.__dict__["_aw_origin"] = _origin(error)
    copy.args = error.args
    copy.path = copy.relative_path = deque(error.relative_path)
    copy.schema_path = copy.relative_schema_path = deque(error.relative_schema_path)
    if path is not None:
        copy.path.appendleft(path)
    if schema_path is not None:
        copy.schema_path.appendleft(schema_path)
    return copy


class _View:
    """The validator as one descending keyword sees it: `descend`, `is_valid`, `iter_errors` and references count
    against the check's budget, and those reaching a shared subschema go through its memo; everything else is the
    validator's own."""

    __slots__ = ("_real", "_keyword", "_budget")

    def __init__(self, real: Any, keyword: str, budget: CheckBudget) -> None:
        self._real = real
        self._keyword = keyword
        self._budget = budget

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _memoized(self, instance: Any, schema: Any, resolver: Any) -> list[ValidationError]:
        real = self._real
        key = (id(schema), id(instance), _base_uri(resolver if resolver is not None else real._resolver))
        return self._budget.remember(  # type: ignore[no-any-return]
            key, lambda: _distinct(real.descend(instance, schema, resolver=resolver)), schema, instance
        )

    def descend(
        self, instance: Any, schema: Any, path: Any = None, schema_path: Any = None, resolver: Any = None
    ) -> Iterator[ValidationError]:
        self._budget.step(self._keyword)
        if id(schema) not in self._budget.shared:  # met once on this path: nothing to share
            return self._real.descend(  # type: ignore[no-any-return]
                instance, schema, path=path, schema_path=schema_path, resolver=resolver
            )
        return (_replayed(e, path, schema_path) for e in self._memoized(instance, schema, resolver))

    def evolve(self, **changes: Any) -> _View:
        return _View(self._real.evolve(**changes), self._keyword, self._budget)

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        return self.descend(instance, self._real.schema, resolver=self._real._resolver)

    def is_valid(self, instance: Any) -> bool:
        return next(self.iter_errors(instance), None) is None

    def _validate_reference(self, ref: str, instance: Any) -> Iterator[ValidationError]:
        try:
            resolved = self._real._resolver.lookup(ref)
        except Exception as exc:  # noqa: BLE001 -- referencing's Unresolvable, as jsonschema wraps it
            raise jsonschema.exceptions._WrappedReferencingError(exc) from exc  # type: ignore[arg-type]
        return self.descend(instance, resolved.contents, resolver=resolved.resolver)


Keyword = Callable[[Any, Any, Any, Any], Iterable[ValidationError] | None]


# Keywords that apply subschemas (they get the memoizing view), and those that can raise on a value they cannot
# take (their exception becomes the keyword's error); the others only count a step.
DESCENDING = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "additionalProperties",
        "allOf",
        "anyOf",
        "contains",
        "dependentSchemas",
        "if",
        "items",
        "not",
        "oneOf",
        "patternProperties",
        "prefixItems",
        "properties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
MAY_RAISE = frozenset(
    {"$ref", "$dynamicRef", "format", "multipleOf", "pattern", "patternProperties", "additionalProperties"}
    | {"unevaluatedItems", "unevaluatedProperties", "propertyNames"}
)


def bounded(keyword: str, function: Keyword) -> Keyword:
    """`function` (a jsonschema keyword implementation) counted against the current check's budget, seeing the
    memoizing view of the validator when it applies subschemas, and (where it can raise) reporting what it raises
    as its own failure to check the value."""
    descending = keyword in DESCENDING

    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Iterable[ValidationError] | None:
        budget = _CURRENT.get()
        if budget is not None:
            budget.step(keyword)
            if descending:
                validator = _View(validator, keyword, budget)
        return function(validator, value, instance, schema)

    if keyword not in MAY_RAISE:
        return counted

    def guarded(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        try:
            yield from counted(validator, value, instance, schema) or ()
        except (CheckBudgetError, RecursionError):
            raise
        except Exception as exc:  # noqa: BLE001 -- a value the keyword cannot take is that keyword's error
            yield ValidationError(f"cannot be checked against `{keyword}` ({type(exc).__name__}: {exc})")

    return guarded


# ---------------------------------------------------------------------------------------------------------------
# Keywords in linear time
# ---------------------------------------------------------------------------------------------------------------


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value under JSON Schema equality: key order does not matter, 1 and 1.0 are the
    same number, true and 1 are not."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, dict):
        return ("o", frozenset((key, canonical(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return ("a", tuple(canonical(item) for item in value))
    return ("?", repr(value))


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    first: dict[Any, int] = {}
    for index, item in enumerate(instance):
        seen = first.setdefault(canonical(item), index)
        if seen != index:
            yield ValidationError(f"has non-unique elements (items {seen} and {index} are equal)")
            return


def multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's `multipleOf`, exact where a float division overflows (a huge integer over a fraction)."""
    try:
        yield from _keywords.multipleOf(validator, divisor, instance, schema)
    except OverflowError:
        if (Fraction(instance) / Fraction(divisor)).denominator != 1:
            yield ValidationError(f"{instance!r} is not a multiple of {divisor}")


def regex_problem(value: str) -> str | None:
    """Why `value` is not a regex (`format: regex`), or None: RE2 parses it in linear time; what RE2 lacks
    (backreferences, lookaround) is left to Python's parser, as jsonschema does, on a value short enough to
    compile at once."""
    if len(value) > MAX_REGEX_FORMAT_CHARS:
        return f"a regex of {len(value):,} characters; this server checks regexes of at most {MAX_REGEX_FORMAT_CHARS:,}"
    try:
        re2.compile(value, _RE2_OPTIONS)
        return None
    except (re2.error, UnicodeEncodeError):
        pass
    try:
        re.compile(value)
    except Exception as exc:  # noqa: BLE001 -- re.error, OverflowError (`a{4294967296}`), RecursionError
        return f"not a regex ({type(exc).__name__}: {exc})"
    return None


def format_(validator: Any, form: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's `format`, with `regex` decided by `regex_problem`."""
    if form == "regex" and validator.format_checker is not None and isinstance(instance, str):
        problem = regex_problem(instance)
        if problem is not None:
            yield ValidationError(f"is not a valid `format: regex`: {problem}")
        return
    yield from _keywords.format(validator, form, instance, schema)


def best_problem(errors: Iterable[ValidationError]) -> tuple[ValidationError, list[Any]] | None:
    """jsonschema's `best_match` heuristic (the most relevant error, then into its context while one nested error
    is more relevant than the rest), with the error's path computed on the way down: a memoized context error's
    `parent` is not the one it was reached through."""
    best = max(errors, key=relevance, default=None)
    if best is None:
        return None
    path = list(best.path)
    while best.context:
        two = heapq.nsmallest(2, best.context, key=relevance)
        if len(two) == 2 and relevance(two[0]) == relevance(two[1]):
            break
        best = two[0]
        path += list(best.path)
    return best, path


def uses_dynamic_refs(schema: Any) -> bool:
    """Whether `$dynamicRef` appears anywhere (its target depends on the path it is reached by)."""
    stack = [schema]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            if "$dynamicRef" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def non_finite_at(value: Any) -> tuple[list[str | int], float] | None:
    """The first NaN or infinite number in a JSON-like value, with its path (JSON has no such numbers: Python's
    reader takes `NaN`, `Infinity` and `1e400`, a strict one does not)."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return path, node
        if isinstance(node, dict):
            stack.extend(([*path, key], item) for key, item in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend(([*path, i], item) for i, item in reversed(list(enumerate(node))))
    return None


def shared_subschemas(schema: Any) -> frozenset[int]:
    """The ids of the subschemas a check may apply twice to one value, so the ones worth memoizing: the targets of
    `$ref`s and the subschemas with more than one parent (YAML aliases), plus the root. A subschema met once on the
    only path to it is applied once per value whenever its shared ancestors are memoized. Empty when the schema
    holds a `$dynamicRef`, whose target depends on the path taken (the budget still bounds such a check)."""
    if not isinstance(schema, dict) or uses_dynamic_refs(schema):
        return frozenset()
    try:
        registry = schema_registry(schema)
        nodes = list(walk(schema))
    except Exception:  # noqa: BLE001 -- malformed beyond walking: no memo (the budget still bounds it)
        return frozenset()
    parents: dict[int, int] = {id(schema): 2}
    for node in nodes:
        for child, _, _ in children(node):
            if isinstance(child, dict):
                parents[id(child)] = parents.get(id(child), 0) + 1
        ref = node.schema.get("$ref")
        if isinstance(ref, str):
            try:
                target = lookup(registry, node.base, ref)
            except Exception:  # noqa: BLE001 -- a dangling ref is reported by the load checks
                continue
            if isinstance(target, dict):
                parents[id(target)] = parents.get(id(target), 0) + 2
    return frozenset(key for key, count in parents.items() if count >= 2)
