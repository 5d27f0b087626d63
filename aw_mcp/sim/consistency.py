"""The consistency guard: each answer checked against what the session established before it.

What is established comes only from JSON: the world's `state:` and the session's own answers, read as records.
An *entity* is any JSON object with an `id` (a string or an integer), wherever it sits in an answer or the state;
its scalar fields are what was last seen of it. A tool is a *read* when it is annotated `readOnlyHint: true`;
any other tool may write, and a call that may write forgets the fields of the entities its arguments name (every
entity's, when they name none) and every read it could have changed. No rule knows a tool by its name.

The rules (a contradiction's `rule`):

- `deleted`: an entity was deleted (an answer showed it with `deleted: true` or a `status` of `deleted` /
  `removed`; or a write whose arguments name it answered `{"deleted": true}` or text saying deleted / removed) and
  a later answer shows it again, not as deleted (a write naming it may bring it back).
- `missing`: an entity the session saw (and did not delete) is named by a call's arguments and the answer is an
  error saying not found / does not exist / no such / 404.
- `field`: a read shows an entity's field with another value than was last seen, and no write since named it.
- `count`: a read asked again with the same arguments, no write since, shows another set of entity ids or other
  list lengths.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aw_mcp.backends.replay import call_key
from aw_mcp.sim.session import WorldSession
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import CallRecord, Contradiction

DELETED_STATUSES = frozenset({"deleted", "removed"})
_DELETED_TEXT = re.compile(r"\b(?:deleted|removed)\b", re.IGNORECASE)
_NOT_FOUND_TEXT = re.compile(r"not[ _-]?found|does not exist|doesn't exist|no such|\b404\b", re.IGNORECASE)

Scalar = str | int | float | bool | None


def json_value(text: str | None, structured: Any = None) -> Any:
    """An answer as JSON (its structured content, else its text parsed), or None when it is not JSON."""
    if structured is not None:
        return structured
    if not text or text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def entities(value: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object with an `id` in a JSON value, depth first."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ident = node.get("id")
            if isinstance(ident, str | int) and not isinstance(ident, bool):
                yield str(ident), node
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))


def scalars(entity: Mapping[str, Any]) -> dict[str, Scalar]:
    return {
        k: v
        for k, v in entity.items()
        if k != "id" and (v is None or isinstance(v, str | int | float | bool))
    }


def marked_deleted(entity: Mapping[str, Any]) -> bool:
    status = entity.get("status")
    return entity.get("deleted") is True or (isinstance(status, str) and status.lower() in DELETED_STATUSES)


def says_deleted(value: Any, text: str | None) -> bool:
    """A write's answer that deletes what its arguments name: `{"deleted": true}` (no id of its own), or text (not
    JSON) saying deleted / removed."""
    if isinstance(value, dict):
        return value.get("deleted") is True and "id" not in value
    return value is None and bool(text) and _DELETED_TEXT.search(text or "") is not None


def argument_values(arguments: Any) -> Iterator[str]:
    """Every scalar in the arguments, as text (an id is matched whatever key names it)."""
    stack = [arguments]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str | int) and not isinstance(node, bool):
            yield str(node)


def shape(value: Any) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """What a repeated read must show again: its entity ids and the lengths of its lists."""
    ids = tuple(sorted({ident for ident, _ in entities(value)}))
    lengths: list[int] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            lengths.append(len(node))
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
    return ids, tuple(lengths)


@dataclass
class Entity:
    fields: dict[str, Scalar] = field(default_factory=dict)
    seen_at: dict[str, int | None] = field(default_factory=dict)  # per field: the call that showed it
    deleted_at: int | None = None
    deleted: bool = False


@dataclass
class Established:
    """What a session's answers (and the world's state) established, kept up to date call by call."""

    read_only: frozenset[str]
    entities: dict[str, Entity] = field(default_factory=dict)
    reads: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)  # a read -> (call, its shape)
    applied: int = 0  # how many of the session's records are in

    @classmethod
    def of_world(cls, world: WorldSpec) -> Established:
        read_only = frozenset(t.name for t in world.tools if t.annotations and t.annotations.readOnlyHint)
        known = cls(read_only)
        if isinstance(world.state, dict | list):
            for ident, obj in entities(world.state):
                known._saw(ident, obj, None)
        return known

    def named(self, arguments: Any) -> set[str]:
        return {value for value in argument_values(arguments) if value in self.entities}

    def _saw(self, ident: str, obj: Mapping[str, Any], index: int | None) -> None:
        entity = self.entities.setdefault(ident, Entity())
        if marked_deleted(obj):
            entity.deleted, entity.deleted_at, entity.fields = True, index, {}
            return
        entity.deleted = False
        for key, value in scalars(obj).items():
            entity.fields[key] = value
            entity.seen_at[key] = index

    def add(self, record: CallRecord) -> None:
        """Take in one committed call (only what entered the world's history counts)."""
        if not record.in_history or record.error is not None:
            return
        text = record.truth if record.truth is not None else record.observation
        value = json_value(text, record.structured if record.truth is None else None)
        if record.tool not in self.read_only:
            self._forget(record.arguments)
        if record.is_error:
            return
        named = self.named(record.arguments)
        for ident, obj in entities(value):
            self._saw(ident, obj, record.index)
        if record.tool not in self.read_only and len(named) == 1 and says_deleted(value, text):
            (ident,) = named
            self._saw(ident, {"deleted": True}, record.index)
        if record.tool in self.read_only:
            self.reads[(record.tool, call_key(record.tool, record.arguments)[1])] = (
                record.index,
                shape(value),
            )

    def _forget(self, arguments: Any) -> None:
        """A call that may write: what it names (everything, when it names nothing known) may have changed."""
        named = self.named(arguments)
        for ident, entity in self.entities.items():
            if not named or ident in named:
                entity.fields.clear()
                entity.seen_at.clear()
        self.reads.clear()

    def check(
        self, tool: str, arguments: dict[str, Any], text: str, structured: Any, is_error: bool
    ) -> list[Contradiction]:
        """What this answer contradicts of what is established (empty: nothing)."""
        found: list[Contradiction] = []
        named = self.named(arguments)
        read = tool in self.read_only
        if is_error:
            if _NOT_FOUND_TEXT.search(text):
                for ident in sorted(named):
                    entity = self.entities[ident]
                    if not entity.deleted:
                        earlier = next(iter(entity.seen_at.values()), None)
                        found.append(
                            Contradiction(
                                rule="missing",
                                message=f"{ident} exists ({_where(earlier)} showed it) but this answer says it was not found",
                                earlier=earlier,
                            )
                        )
            return found
        value = json_value(text, structured)
        for ident, obj in entities(value):
            entity = self.entities.get(ident)
            if entity is None or marked_deleted(obj):
                continue
            if entity.deleted and (read or ident not in named):
                found.append(
                    Contradiction(
                        rule="deleted",
                        message=f"{ident} was deleted ({_where(entity.deleted_at)}), but this answer shows it",
                        earlier=entity.deleted_at,
                    )
                )
                continue
            if read:
                for key, seen in scalars(obj).items():
                    if key in entity.fields and entity.fields[key] != seen:
                        at = entity.seen_at.get(key)
                        found.append(
                            Contradiction(
                                rule="field",
                                message=f"{ident}.{key} is {seen!r} here, but {_where(at)} showed "
                                f"{entity.fields[key]!r} and no call since changed {ident}",
                                earlier=at,
                            )
                        )
        if read:
            earlier = self.reads.get((tool, call_key(tool, arguments)[1]))
            if earlier is not None and earlier[1] != shape(value):
                found.append(
                    Contradiction(
                        rule="count",
                        message=f"the same {tool} call at {_where(earlier[0])} showed "
                        f"{_shape_text(earlier[1])}; this one shows {_shape_text(shape(value))}, with no call between "
                        "that could change it",
                        earlier=earlier[0],
                    )
                )
        return found


def _where(index: int | None) -> str:
    return "the world's state" if index is None else f"call {index}"


def _shape_text(summary: tuple[tuple[str, ...], tuple[int, ...]]) -> str:
    ids, lengths = summary
    parts = [f"ids {', '.join(ids)}" if ids else "no ids"]
    if lengths:
        parts.append(f"list lengths {', '.join(map(str, lengths))}")
    return " and ".join(parts)


class Guard:
    """Each session's `Established`, brought up to date with its records before each check."""

    def __init__(self, world: WorldSpec) -> None:
        self.world = world
        self._known: weakref.WeakKeyDictionary[WorldSession, Established] = weakref.WeakKeyDictionary()

    def established(self, session: WorldSession) -> Established:
        known = self._known.get(session)
        if known is None or known.applied > len(session.records):
            known = self._known[session] = Established.of_world(self.world)
        for record in sorted(session.records[known.applied :], key=lambda r: r.index):
            known.add(record)
        known.applied = len(session.records)
        return known
