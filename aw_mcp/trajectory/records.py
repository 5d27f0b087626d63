"""The trajectory's records: a call record and its fault entries as typed models, written and read only here.

One JSON line per call (`"type": "call"`) and one per answered tools/list (`"type": "tools_list"`, so a reader can
tell whether the agent re-listed after a catalog change), versioned by `v`. Reading validates every line against the
models and names the file and line of the first bad or foreign one; a torn last line (a crash mid-write) is skipped
with a warning.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from aw_mcp.core.errors import UserError
from aw_mcp.core.jsonl import validation_problems
from aw_mcp.core.private_files import open_private
from aw_mcp.core.redaction import redact_secrets

log = logging.getLogger(__name__)

# 1: the first format. 2: a call may say who answered it (`answered_by`) and carry a `shadow` prediction.
# A version-1 line reads as a version-2 one answered by the world model with no shadow.
TRAJECTORY_VERSION = 2

# Who produced the observation the agent saw: the world model, a real upstream server (aw-mcp mirror), a recorded
# call replayed (the hybrid backend) or the answer cache.
AnsweredBy = Literal["model", "upstream", "recording", "cache"]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FaultEntry(BaseModel):
    """One perturbation that fired on a call, as the trajectory and `world://faults` list it.

    Kind-specific details (an error's `status`, a catalog change's `added`/`removed`, ...) are kept as extra
    fields; a field is written only when it was set, so an entry reads back as it was written.
    """

    model_config = ConfigDict(extra="allow")

    name: str
    kind: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    schedule: dict[str, Any] = Field(default_factory=dict)
    call: int | None = None  # the how-many-th matching call fired it
    applied: bool = True  # False: it fired but had no effect (`reason` says why)
    breaker: str | None = None  # a circuit breaker's state
    scale: float | None = None  # a degrading schedule's strength
    reason: str | None = None
    latency_ms: float | None = None
    instruction: str | None = None
    stale_of: int | None = None  # the earlier call (1-based) whose answer was repeated
    ground_truth: str | None = None  # what the world model answered before the fault changed it
    expect_call: dict[str, Any] | None = (
        None  # an injection's provoked call (perturb.spec.ExpectCall), if known
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class _Line(BaseModel):
    """What every trajectory line has: its format version (a newer one is refused, not misread)."""

    model_config = ConfigDict(extra="ignore")

    v: int = TRAJECTORY_VERSION

    @field_validator("v")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v > TRAJECTORY_VERSION:
            raise ValueError(
                f"written by a newer aw-mcp (trajectory version {v}); this one reads up to {TRAJECTORY_VERSION}"
            )
        return v

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    def to_line(self) -> str:
        """The line: JSON that any strict reader parses. A NaN or infinite number (Python reads `NaN`,
        `Infinity` and `1e400`; JSON has no such numbers) is written as the string "NaN", "Infinity" or
        "-Infinity"."""
        value = self.to_json()
        try:
            return json.dumps(value, ensure_ascii=False, default=str, allow_nan=False)
        except ValueError:
            return json.dumps(_finite(value), ensure_ascii=False, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    """`value` with each NaN or infinite float as its JavaScript spelling, a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


class ForkPoint(BaseModel):
    """Where a forked session came from: it inherited `session`'s calls before index `call` (0-based)."""

    session: str
    call: int


class ShadowPrediction(BaseModel):
    """What the world model predicted for a call another source answered (aw-mcp mirror --shadow): its observation
    beside the real one, for calibration. `error` is set (and `observation` may be None) when the prediction
    failed: the model server was unreachable, the session ended first, ..."""

    model_config = ConfigDict(extra="ignore")

    observation: str | None = None
    structured: Any = None
    is_error: bool = False
    latency_ms: float = 0.0
    model: str | None = None
    error: str | None = None


class Contradiction(BaseModel):
    """One thing an answer contradicts of what the session established (sim/consistency.py names the rules)."""

    rule: Literal["deleted", "missing", "field", "count"]
    message: str
    earlier: int | None = None  # the call whose answer established it (None: the world's `state:`)


class Consistency(BaseModel):
    """The consistency guard's finding on a call (written only when it found something or drew again): the
    contradictions of the answer kept, how many answers were drawn (`model.on_contradiction: resample`) and which of
    them (1-based) was kept."""

    contradictions: list[Contradiction] = Field(default_factory=list)
    drawn: int = 1
    kept: int = 1


class CallRecord(_Line):
    """One line of the trajectory: everything needed to audit, report on or replay one tool call.

    `world`, `session` and `index` are always written; on reading they may be missing (a hand-written line names
    only its tool and arguments).
    """

    type: Literal["call"] = "call"
    world: str | None = None
    session: str | None = None
    index: int = 0
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    time: str = Field(default_factory=utc_now)
    messages_hash: str | None = None
    raw: str | None = None
    reasoning: str | None = None
    observation: str | None = None
    structured: Any = None
    is_error: bool = False
    latency_ms: float = 0.0
    error: str | None = None
    faults: list[FaultEntry] = Field(default_factory=list)
    attempts: int = 0
    # When a fault changed what the agent saw: the world model's own observation, which the history keeps.
    truth: str | None = None
    # False when no world-model answer belongs in the history (an injected error, a stale answer).
    in_history: bool = True
    # Set when the answers are not the world model's (the demo backend): what produced them instead.
    notice: str | None = None
    # Earliest turns left out of this call's prompt to fit the model's context (0: the whole history was shown).
    compacted: int = 0
    # A call of a forked session: the parent session and the fork point (calls before it are the parent's lines).
    forked_from: ForkPoint | None = None
    # Who answered (version 2; absent in older lines: the world model).
    answered_by: AnsweredBy = "model"
    # The world model's prediction of this call's observation, when another source answered it (version 2).
    shadow: ShadowPrediction | None = None
    # What the consistency guard found (absent: nothing, or the guard was off).
    consistency: Consistency | None = None

    @field_validator("faults", mode="before")
    @classmethod
    def _no_faults(cls, faults: Any) -> Any:
        return [] if faults is None else faults

    @field_serializer("faults")
    def _faults_as_written(self, faults: list[FaultEntry]) -> list[dict[str, Any]]:
        return [fault.to_json() for fault in faults]

    def applied_faults(self) -> list[FaultEntry]:
        return [fault for fault in self.faults if fault.applied]


class ListingRecord(_Line):
    """One tools/list the server answered: the tools the agent was shown, and where in its session it asked."""

    type: Literal["tools_list"] = "tools_list"
    world: str | None = None
    session: str | None = None
    before_call: int = (
        0  # the index the session's next call gets: the listing came after calls 0..before_call-1
    )
    time: str = Field(default_factory=utc_now)
    tools: list[str] = Field(default_factory=list)
    # The tools as listed (MCP Tool objects), written when they differ from the trajectory's previous listing
    # (its first, and after a catalog change): `aw-mcp import recording` reads the catalog from them.
    definitions: list[dict[str, Any]] | None = None


class ShadowRecord(_Line):
    """The shadow prediction of an earlier call line (version 2), written when the prediction ends: it runs off the
    agent's path, so the call's own line is written first. Reading attaches it to that call (`CallRecord.shadow`)."""

    type: Literal["shadow"] = "shadow"
    world: str | None = None
    session: str | None = None
    index: int = 0
    time: str = Field(default_factory=utc_now)
    shadow: ShadowPrediction


TrajectoryLine = CallRecord | ListingRecord | ShadowRecord
LINE_TYPES: dict[str, type[CallRecord] | type[ListingRecord] | type[ShadowRecord]] = {
    "call": CallRecord,
    "tools_list": ListingRecord,
    "shadow": ShadowRecord,
}


class TrajectoryWriter:
    """Appends one JSON line per call and flushes it at once, so a crash loses nothing already answered."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        # Owner-only, an existing file too: arguments and observations may hold whatever the agent and the world
        # model wrote (aw_mcp/core/private_files.py).
        self._file = open_private(self.path, "a")
        self._lock = threading.Lock()

    def write(self, record: TrajectoryLine) -> None:
        """Blocking (fsync): from async code call `await anyio.to_thread.run_sync(writer.write, record)`.
        The API key never reaches the file, wherever a server echoed it (aw_mcp/core/redaction.py)."""
        line = redact_secrets(record.to_line())
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


class TrajectoryFormatError(UserError, ValueError):
    pass


def read_trajectory(path: str | Path) -> Iterator[CallRecord]:
    """The call records of a trajectory file, in order, each with its shadow prediction when a later line gave
    one. Raises TrajectoryFormatError naming file and line."""
    yield from with_shadows(read_lines(path))


def with_shadows(lines: Iterable[TrajectoryLine]) -> list[CallRecord]:
    """The call records of these lines, each given the prediction of a later `shadow` line about it."""
    calls: list[CallRecord] = []
    by_key: dict[tuple[str | None, int], CallRecord] = {}
    for line in lines:
        if isinstance(line, CallRecord):
            calls.append(line)
            by_key[(line.session, line.index)] = line
        elif isinstance(line, ShadowRecord) and (line.session, line.index) in by_key:
            by_key[(line.session, line.index)].shadow = line.shadow
    return calls


def read_lines(path: str | Path, warnings: list[str] | None = None) -> Iterator[TrajectoryLine]:
    """Every record of a trajectory file (calls and tool listings), in order. A bad or foreign line raises
    TrajectoryFormatError naming file and line; a torn last line is skipped with a warning (also appended to
    `warnings`, for reports that list what they left out)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
    except FileNotFoundError:
        raise TrajectoryFormatError(f"{path}: trajectory file does not exist") from None
    except OSError as exc:
        raise TrajectoryFormatError(f"{path}: cannot read trajectory: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TrajectoryFormatError(f"{path}: not a text file ({exc.reason})") from None
    # A crash mid-write leaves a last line without its newline; that call never completed, so nothing is lost.
    torn = len(lines) if lines and not text.endswith("\n") else 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == torn:
                message = f"{path}:{number}: ignoring a torn last line ({exc.msg})"
                log.warning("%s", message)
                if warnings is not None:
                    warnings.append(message)
                return
            raise TrajectoryFormatError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(entry, dict):
            raise TrajectoryFormatError(
                f"{path}:{number}: expected a JSON object, got {type(entry).__name__}"
            )
        kind = entry.get("type", "call")
        model = LINE_TYPES.get(kind) if isinstance(kind, str) else None
        if model is None:
            raise TrajectoryFormatError(
                f"{path}:{number}: not a trajectory line (type {kind!r}; expected one of "
                f"{', '.join(repr(t) for t in LINE_TYPES)}) - is this an aw-mcp --record file?"
            )
        try:
            yield model.model_validate(entry)
        except ValidationError as exc:
            raise TrajectoryFormatError(f"{path}:{number}: {validation_problems(exc)}") from None
