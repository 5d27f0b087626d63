"""World sessions: the history each simulated world keeps between calls, and its append-only trajectory."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from aw_mcp.context_budget import HISTORY_OBSERVATION_CHARS, clip_text, clip_value
from aw_mcp.errors import UserError
from aw_mcp.prompting import Turn, render_system_prompt
from aw_mcp.world import WorldSpec

log = logging.getLogger(__name__)

TRAJECTORY_VERSION = 1
DEFAULT_SESSION = "default"
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_SESSION_TTL_S = 3600.0
MAX_SESSION_KEY_CHARS = 128


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
    # Earliest turns left out of this call's prompt to fit the model's context (0: the whole history was shown).
    compacted: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"v": TRAJECTORY_VERSION, "type": "call", **self.__dict__}


class TrajectoryWriter:
    """Appends one JSON line per call and flushes it at once, so a crash loses nothing already answered."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Owner-only: arguments and observations may hold whatever the agent and the world model wrote.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: CallRecord) -> None:
        """Blocking (fsync): from async code call `await anyio.to_thread.run_sync(writer.write, record)`."""
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
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
    except FileNotFoundError:
        raise TrajectoryFormatError(f"{path}: trajectory file does not exist") from None
    except OSError as exc:
        raise TrajectoryFormatError(f"{path}: cannot read trajectory: {exc.strerror or exc}") from None
    # A crash mid-write leaves a last line without its newline; that call never completed, so nothing is lost.
    torn = len(lines) if lines and not text.endswith("\n") else 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == torn:
                log.warning("%s:%d: ignoring a torn last line (%s)", path, number, exc.msg)
                return
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
        self.compacted = 0  # earliest history turns no longer shown to the world model (only grows)
        self.busy = 0  # calls in flight: a busy session is never evicted
        self.last_used = time.monotonic()

    def claim_index(self) -> int:
        """Reserve the next call index (calls may overlap; each gets a distinct, ordered index)."""
        index = self._next_index
        self._next_index += 1
        return index

    def add(self, record: CallRecord) -> None:
        self.records.append(record)
        if record.observation is not None and record.error is None and record.in_history:
            seen = record.truth if record.truth is not None else record.observation
            arguments = clip_value(record.arguments)
            self.history.append(Turn(record.tool, arguments, clip_text(seen, HISTORY_OBSERVATION_CHARS)))

    def restore(self, record: dict[str, Any]) -> None:
        """Replay a recorded call into this session (for --resume)."""
        fields = {k: record[k] for k in CallRecord.__dataclass_fields__ if k in record}
        rec = CallRecord(**{**fields, "faults": record.get("faults") or []})
        self._next_index = max(self._next_index, rec.index + 1)
        self.add(rec)


class SessionKeyError(ValueError):
    """A session key the registry refuses (too long), or no room for another live session."""


class RecordingError(RuntimeError):
    """The trajectory could not be written; the call is not committed."""


class SessionRegistry:
    """World sessions by key: one per stdio process, one per HTTP client session (see ARCHITECTURE.md).

    Bounded: a session idle for `idle_ttl_s` is evicted, at most `max_sessions` live at once (the least recently
    used idle one makes room), keys are at most MAX_SESSION_KEY_CHARS. The default session is never evicted.
    """

    def __init__(
        self,
        world: WorldSpec,
        writer: TrajectoryWriter | None = None,
        template: str | None = None,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_ttl_s: float | None = DEFAULT_SESSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.world = world
        self.writer = writer
        self.template = template  # the system prompt template (None: the bundled one for the world's domain)
        self.max_sessions = max_sessions
        self.idle_ttl_s = idle_ttl_s
        self.clock = clock
        self._sessions: dict[str, WorldSession] = {}
        self.default_key = DEFAULT_SESSION

    def get(self, key: str | None = None) -> WorldSession:
        key = key or self.default_key
        if len(key) > MAX_SESSION_KEY_CHARS:
            raise SessionKeyError(
                f"session key is {len(key):,} characters; at most {MAX_SESSION_KEY_CHARS} allowed"
            )
        now = self.clock()
        self.evict_idle(now)
        session = self._sessions.get(key)
        if session is None:
            if len(self._sessions) >= self.max_sessions and not self._evict_oldest_idle():
                raise SessionKeyError(
                    f"too many live world sessions ({self.max_sessions}); end one (DELETE) or wait for one to idle out"
                )
            session = self._sessions[key] = WorldSession(self.world, key, template=self.template)
        session.last_used = now
        return session

    def evict_idle(self, now: float | None = None) -> int:
        """Drop sessions idle longer than the TTL; returns how many."""
        if self.idle_ttl_s is None:
            return 0
        now = self.clock() if now is None else now
        stale = [
            k
            for k, s in self._sessions.items()
            if k != self.default_key and not s.busy and now - s.last_used > self.idle_ttl_s
        ]
        for key in stale:
            del self._sessions[key]
        return len(stale)

    def _evict_oldest_idle(self) -> bool:
        idle = [(s.last_used, k) for k, s in self._sessions.items() if k != self.default_key and not s.busy]
        if not idle:
            return False
        del self._sessions[min(idle)[1]]
        return True

    def drop(self, key: str) -> bool:
        """Forget a session and its world (its trajectory lines stay on disk)."""
        return self._sessions.pop(key, None) is not None

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[WorldSession]:
        return list(self._sessions.values())

    def new_key(self) -> str:
        return uuid.uuid4().hex[:12]

    def record(self, session: WorldSession, record: CallRecord) -> None:
        """Write ahead, then commit to the session (blocking; for restoring and for synchronous callers)."""
        if self.writer is not None:
            self.writer.write(record)
        session.add(record)

    async def commit(self, session: WorldSession, record: CallRecord) -> None:
        """Write the record ahead (off the event loop), then add it to the session. If the write fails the
        session does not change and RecordingError says why; a cancellation cannot split the two steps."""
        with anyio.CancelScope(shield=True):
            if self.writer is not None:
                try:
                    await anyio.to_thread.run_sync(self.writer.write, record)
                except (OSError, ValueError) as exc:
                    raise RecordingError(f"the trajectory could not be written: {exc}") from exc
            session.add(record)

    def resume(self, path: str | Path) -> int:
        """Load a recorded trajectory; the default session continues the last recorded one. Returns calls loaded."""
        count = 0
        last_session = None
        for record in read_trajectory(path):
            if record.get("world") not in (None, self.world.name):
                continue
            key = str(record.get("session") or DEFAULT_SESSION)[:MAX_SESSION_KEY_CHARS]
            self.get(key).restore(record)
            last_session, count = key, count + 1
        if last_session is not None:
            self.default_key = last_session
        return count
