"""The one answer type of the call pipeline, and the value a fault returns when it cannot apply.

Every step of a call (arguments check, the before-phase faults, the world model's attempts, parsing, the after-phase
faults) returns an `Answer`; a later step returns a new one (`dataclasses.replace`), none writes it anywhere. The
simulator builds the call's trajectory record from the final one, once (`Call.record`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aw_mcp.trajectory.records import Consistency


@dataclass(frozen=True)
class Generated:
    """What the world model's attempts at one call leave for its record."""

    raw: str | None = None  # the last attempt's text, as the backend returned it
    reasoning: str | None = None
    attempts: int = 0
    messages_hash: str | None = None  # the prompt's
    compacted: int = 0  # the earliest history turn the prompt showed
    notice: str | None = None  # the backend's own label for this answer (a demo answer for other arguments)
    answered_by: str | None = None  # who produced it when not the world model (records.AnsweredBy)
    consistency: Consistency | None = None  # what the consistency guard found (sim/consistency.py)


@dataclass(frozen=True)
class Answer:
    """What a call comes to so far: what the agent sees (`text`, `structured`, `is_error`) and what the trajectory
    and the world keep (`error`, `observation`, `truth`, `in_history`, `generated`)."""

    text: str
    structured: Any = None
    is_error: bool = False
    error: str | None = None  # why the call failed, in the trajectory's words (None: it did not)
    observation: str | None = (
        None  # the observation recorded, when it is not `text` (a parsed answer's own text)
    )
    truth: str | None = None  # the world model's own observation, when a fault changed what the agent saw
    in_history: bool = (
        True  # whether the world keeps this call in its history (an aborted call leaves no trace)
    )
    protocol_error: tuple[int, str] | None = (
        None  # (JSON-RPC code, message): answer with an error, not a result
    )
    generated: Generated | None = None  # None: the world model was not asked
    # The MCP content blocks of an answer a real server gave (aw-mcp mirror), sent as they came while `text` is
    # still theirs (a fault that changes the text sends the text instead): (the text they render, the blocks).
    content: tuple[str, tuple[Any, ...]] | None = None

    @property
    def recorded_observation(self) -> str:
        return self.observation if self.observation is not None else self.text


@dataclass(frozen=True)
class Skipped:
    """A fault that fired but could not apply to this call; its trajectory entry gives `reason`."""

    reason: str
