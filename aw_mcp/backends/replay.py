"""World model that answers from a trajectory recorded with ``--record``: deterministic runs for agent CI.

A call is matched by its tool name and arguments (canonical JSON, keys sorted), not by the prompt, so a replay still
works after prompt templates change. When the recording holds the same call several times, the k-th such call in
this session gets the k-th recorded answer and the last answer repeats after they run out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from aw_mcp.backends.contract import WorldModel
from aw_mcp.core.model_io import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)
from aw_mcp.trajectory.records import TrajectoryFormatError, read_trajectory

CallKey = tuple[str, str]


class ReplayMiss(BackendError):
    """The recording has no answer for this call."""


def call_key(tool: str, arguments: dict[str, Any]) -> CallKey:
    return tool, json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _load(path: Path) -> dict[CallKey, list[Generation]]:
    try:
        records = list(read_trajectory(path))
    except TrajectoryFormatError as error:
        raise BackendError(f"replay: {error}") from None
    answers: dict[CallKey, list[Generation]] = defaultdict(list)
    for record in records:
        if record.raw is None:
            continue  # the call failed before the model answered; nothing to replay
        answers[call_key(record.tool, record.arguments)].append(
            Generation(text=record.raw, reasoning=record.reasoning or "")
        )
    return dict(answers)


class ReplayWorldModel(WorldModel):
    """Answers each tool call with the model output recorded for the same call."""

    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._answers = _load(self.path)
        self._served: dict[CallKey, int] = defaultdict(int)

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        if call is None:
            raise BackendError("replay: the caller did not say which tool call to answer")
        key = call_key(call.tool, call.arguments)
        recorded = self._answers.get(key)
        if not recorded:
            tools = ", ".join(sorted({tool for tool, _ in self._answers})) or "none"
            raise ReplayMiss(
                f"replay: no recorded answer for tool {call.tool!r} with arguments {key[1]} in {self.path} "
                f"(recorded tools: {tools})"
            )
        served = self._served[key]
        self._served[key] = served + 1
        answer = recorded[min(served, len(recorded) - 1)]
        # A fresh copy: callers may annotate ``extra`` and the recording must stay as it was.
        return Generation(text=answer.text, reasoning=answer.reasoning, extra={"replayed": True})

    async def aclose(self) -> None:
        return None
