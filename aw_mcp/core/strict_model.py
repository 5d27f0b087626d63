"""The base of every model that reads a user's YAML: unknown keys are errors, `x-` keys are free extensions, and
numbers and booleans are strict (`temperature: "0.6"` or `readOnlyHint: "yes"` is an error, not a silent coercion:
quoted, it is text, and a typo'd value like `"0.6x"` would otherwise read differently from what was meant)."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Strict, model_validator

_SCALARS = (bool, int, float, str)


def http_url(value: str | None) -> str | None:
    """A model server's base URL (a world's `model.base_url`, `AW_BASE_URL`): http or https with a host."""
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http(s) URL such as http://127.0.0.1:8000/v1")
    return value


def scalar_kinds(annotation: Any) -> set[type]:
    """The scalar types a field's annotation admits (through Optional, unions and Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return scalar_kinds(typing.get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return set().union(*(scalar_kinds(arg) for arg in typing.get_args(annotation)))
    return {annotation} if annotation in _SCALARS else set()


class StrictSpecModel(BaseModel):
    """Unknown keys are errors (they are almost always typos); `x-` keys are free-form extensions."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_extensions(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
        return data

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Every field that takes only numbers or booleans validates strictly (an int still reads as a float)."""
        super().__pydantic_init_subclass__(**kwargs)
        loose = [
            field
            for field in cls.model_fields.values()
            if (kinds := scalar_kinds(field.annotation))
            and str not in kinds
            and not any(isinstance(m, Strict) for m in field.metadata)
        ]
        for field in loose:
            field.metadata.append(Strict())
        if loose:
            cls.model_rebuild(force=True)
