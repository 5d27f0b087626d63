"""Reading a JSON-lines file of user input into pydantic models, with `file:line: field: message` errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from aw_mcp.core.errors import InputError

M = TypeVar("M", bound=BaseModel)


def validation_problems(error: ValidationError) -> str:
    """Every problem of a validation error as `field: message`, joined by `; `."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(line)'}: {e['msg']}" for e in error.errors(include_url=False)
    )


def read_models(path: str | Path, model: type[M]) -> Iterator[tuple[int, str, M]]:
    """(line number, line, parsed model) for every non-blank line; InputError naming file:line on a bad one."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, line, model.model_validate_json(line)
        except ValidationError as exc:
            raise InputError(f"{path}:{number}: {validation_problems(exc)}") from None
