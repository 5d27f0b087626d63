"""Warnings collected while importing, each naming the JSON pointer of the construct it is about."""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from typing import TextIO


def json_pointer(*parts: str | int) -> str:
    """`#/paths/~1pets~1{id}/get`: RFC 6901 escaping, so a user can find the spot in the source document."""
    escaped = (str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    return "#/" + "/".join(escaped) if parts else "#"


def child_pointer(pointer: str, *parts: str | int) -> str:
    tail = "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    return f"{pointer.rstrip('/')}/{tail}" if tail else pointer


ECHOED_PER_SHAPE = (
    5  # warnings of one shape printed as they arise; the rest are counted (a big API repeats them)
)
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|\d+")


def shape(message: str) -> str:
    """A warning with its quoted names and numbers blanked: the same kind of problem at another place."""
    return _VARYING.sub("…", message)


@dataclass
class ImportLog:
    """Warnings in the order they arose; an identical warning (same pointer, same text) is kept once, because a
    shared component reached from many operations would otherwise repeat it for each of them. Each kind of warning
    is echoed ECHOED_PER_SHAPE times, then one line says the others are counted (GitHub's REST description repeats
    two kinds about 1,000 times each); `warnings` keeps them all."""

    warnings: list[str] = field(default_factory=list)
    echo: TextIO | None = None  # print each new warning here as it arises (the CLI passes sys.stderr)
    _shapes: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def warn(self, pointer: str, message: str) -> None:
        line = f"{pointer}: {message}"
        if line in self._seen:
            return
        self._seen.add(line)
        self.warnings.append(line)
        kind = shape(message)
        count = self._shapes[kind] = self._shapes.get(kind, 0) + 1
        if self.echo is None or count > ECHOED_PER_SHAPE + 1:
            return
        if count <= ECHOED_PER_SHAPE:
            print(f"warning: {line}", file=self.echo, flush=True)
        else:
            print(f"warning: more like this ({kind}) are counted, not shown", file=self.echo, flush=True)

    @functools.cached_property
    def _seen(self) -> set[str]:
        return set(self.warnings)

    @classmethod
    def to_stderr(cls) -> ImportLog:
        return cls(echo=sys.stderr)
