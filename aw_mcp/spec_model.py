"""The base of every model that reads a user's YAML: unknown keys are errors, `x-` keys are free extensions."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class StrictSpecModel(BaseModel):
    """Unknown keys are errors (they are almost always typos); `x-` keys are free-form extensions."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_extensions(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
        return data
