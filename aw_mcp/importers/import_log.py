"""Warnings collected while importing, each naming the JSON pointer of the construct it is about."""

from __future__ import annotations

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


@dataclass
class ImportLog:
    """Warnings in the order they arose; an identical warning (same pointer, same text) is kept once, because a
    shared component reached from many operations would otherwise repeat it for each of them."""

    warnings: list[str] = field(default_factory=list)
    echo: TextIO | None = None  # print each new warning here as it arises (the CLI passes sys.stderr)

    def warn(self, pointer: str, message: str) -> None:
        line = f"{pointer}: {message}"
        if line in self.warnings:
            return
        self.warnings.append(line)
        if self.echo is not None:
            print(f"warning: {line}", file=self.echo, flush=True)

    @classmethod
    def to_stderr(cls) -> ImportLog:
        return cls(echo=sys.stderr)
