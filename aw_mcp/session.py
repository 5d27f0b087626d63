"""World sessions: the history each simulated world keeps between calls, and its append-only trajectory."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aw_mcp.errors import UserError
from aw_mcp.prompting import Turn, render_system_prompt
from aw_mcp.world import WorldSpec

TRAJECTORY_VERSION = 1
DEFAULT_SESSION = "default"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class CallRecord:
    """One line of the trajectory: everything needed to audit, report on or replay one tool call."""

    world: str
    session: str
    index: int
    tool: str
    arguments: dict[str, Any]
    time: str = field(default_factory=utc_now)
    messages_hash: str | None = None
    raw: str | None = None
    reasoning: str | None = None
    observation: str | None = None
    structured: Any = None
    is_error: bool = False
    latency_ms: float = 0.0
    error: str | None = None
    faults: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    # When a fault changed what the agent saw: the world model's own observation, which the history keeps.
    truth: str | None = None
    # False when no world-model answer belongs in the history (an injected error, a stale answer).
    in_history: bool = True
    # Set when the answers are not the world model's (the demo backend): what produced them instead.
    notice: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"v": TRAJECTORY_VERSION, "type": "call", **self.__dict__}


class TrajectoryWriter:
    """Appends one JSON line per call and flushes it at once, so a crash loses nothing already answered."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: CallRecord) -> None:
        line = json.dumps(record.to_json(), ensure_ascii=False, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


class TrajectoryFormatError(UserError, ValueError):
    pass


def read_trajectory(path: str | Path) -> Iterator[dict[str, Any]]:
    """The call records of a trajectory file, in order. Raises TrajectoryFormatError naming file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise TrajectoryFormatError(f"{path}: trajectory file does not exist") from None
    except OSError as exc:
        raise TrajectoryFormatError(f"{path}: cannot read trajectory: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryFormatError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise TrajectoryFormatError(
                f"{path}:{number}: expected a JSON object, got {type(record).__name__}"
            )
        if record.get("type", "call") != "call":
            continue  # session headers and other non-call lines
        if not isinstance(record.get("tool"), str) or not isinstance(record.get("arguments", {}), dict):
            raise TrajectoryFormatError(
                f"{path}:{number}: a call record needs a string 'tool' and object 'arguments'"
            )
        yield record


class WorldSession:
    """One simulated world's history. Observations become assistant turns of the next prompt."""

    def __init__(
        self,
        world: WorldSpec,
        session_id: str = DEFAULT_SESSION,
        now: str | None = None,
        template: str | None = None,
    ):
        self.world = world
        self.id = session_id
        self.now = world.now or now or utc_now()
        self.history: list[Turn] = []
        self.records: list[CallRecord] = []
        self._next_index = 0
        self.system_prompt = render_system_prompt(world, self.now, template)

    def claim_index(self) -> int:
        """Reserve the next call index (calls may overlap; each gets a distinct, ordered index)."""
        index = self._next_index
        self._next_index += 1
        return index

    def add(self, record: CallRecord) -> None:
        self.records.append(record)
        if record.observation is not None and record.error is None and record.in_history:
            seen = record.truth if record.truth is not None else record.observation
            self.history.append(Turn(record.tool, record.arguments, seen))

    def restore(self, record: dict[str, Any]) -> None:
        """Replay a recorded call into this session (for --resume)."""
        fields = {k: record[k] for k in CallRecord.__dataclass_fields__ if k in record}
        rec = CallRecord(**{**fields, "faults": record.get("faults") or []})
        self._next_index = max(self._next_index, rec.index + 1)
        self.add(rec)


class SessionRegistry:
    """World sessions by key: one per stdio process, one per HTTP client session (see ARCHITECTURE.md)."""

    def __init__(self, world: WorldSpec, writer: TrajectoryWriter | None = None, template: str | None = None):
        self.world = world
        self.writer = writer
        self.template = template  # the system prompt template (None: the bundled one for the world's domain)
        self._sessions: dict[str, WorldSession] = {}
        self.default_key = DEFAULT_SESSION

    def get(self, key: str | None = None) -> WorldSession:
        key = key or self.default_key
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = WorldSession(self.world, key, template=self.template)
        return session

    def sessions(self) -> list[WorldSession]:
        return list(self._sessions.values())

    def new_key(self) -> str:
        return uuid.uuid4().hex[:12]

    def record(self, session: WorldSession, record: CallRecord) -> None:
        session.add(record)
        if self.writer is not None:
            self.writer.write(record)

    def resume(self, path: str | Path) -> int:
        """Load a recorded trajectory; the default session continues the last recorded one. Returns calls loaded."""
        count = 0
        last_session = None
        for record in read_trajectory(path):
            if record.get("world") not in (None, self.world.name):
                continue
            key = str(record.get("session") or DEFAULT_SESSION)
            self.get(key).restore(record)
            last_session, count = key, count + 1
        if last_session is not None:
            self.default_key = last_session
        return count
