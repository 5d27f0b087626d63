"""World sessions: the history each simulated world keeps between calls (its trajectory lines: records.py)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio

from aw_mcp.context_budget import HISTORY_OBSERVATION_CHARS, clip_text, clip_value
from aw_mcp.ledger import Ledger
from aw_mcp.prompting import Turn
from aw_mcp.records import CallRecord, ListingRecord, TrajectoryLine, TrajectoryWriter, read_lines, utc_now
from aw_mcp.transcript import Transcript
from aw_mcp.world import WorldSpec

log = logging.getLogger(__name__)

DEFAULT_SESSION = "default"
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_SESSION_TTL_S = 3600.0
MAX_SESSION_KEY_CHARS = 128


class WorldSession:
    """One simulated world's history. Observations become assistant turns of the next prompt."""

    def __init__(
        self,
        world: WorldSpec,
        session_id: str = DEFAULT_SESSION,
        now: str | None = None,
    ):
        self.world = world
        self.id = session_id
        self.now = world.now or now or utc_now()
        self.transcript = Transcript(world)  # the history, rendered for the world model as it grows
        # What earlier calls established (screen domains: only fault-made changes; the screen shows the rest).
        self.ledger = Ledger(include_writes=world.domain == "mcp")
        self.records: list[CallRecord] = []
        self.listings: list[ListingRecord] = []  # the tools/list requests answered in this session
        self._next_index = 0
        self.compacted = 0  # earliest history turns no longer shown to the world model (only grows)
        self.busy = 0  # calls in flight: a busy session is never evicted
        self.last_used = time.monotonic()

    def claim_index(self) -> int:
        """Reserve the next call index (calls may overlap; each gets a distinct, ordered index)."""
        index = self._next_index
        self._next_index += 1
        return index

    @property
    def next_index(self) -> int:
        return self._next_index

    def add(self, record: CallRecord) -> None:
        self.records.append(record)
        if record.observation is not None and record.error is None and record.in_history:
            seen = record.truth if record.truth is not None else record.observation
            arguments = clip_value(record.arguments)
            self.transcript.append(Turn(record.tool, arguments, clip_text(seen, HISTORY_OBSERVATION_CHARS)))

    @property
    def history(self) -> list[Turn]:
        """The calls the world took in, in commit order: what the world model is shown (read-only)."""
        return self.transcript.turns

    def restore(self, record: CallRecord) -> None:
        """Replay a recorded call into this session (for --resume)."""
        self._next_index = max(self._next_index, record.index + 1)
        self.add(record)


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
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_ttl_s: float | None = DEFAULT_SESSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.world = world
        self.writer = writer
        self.max_sessions = max_sessions
        self.idle_ttl_s = idle_ttl_s
        self.clock = clock
        self._sessions: dict[str, WorldSession] = {}
        self.default_key = DEFAULT_SESSION
        # Every line written or restored, across sessions (evicted ones included), when someone needs it at the
        # end (`aw-mcp serve --scorecard`); None: not kept.
        self.journal: list[TrajectoryLine] | None = None

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
            session = self._sessions[key] = WorldSession(self.world, key)
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
        self._keep(record)
        session.add(record)

    def _keep(self, line: TrajectoryLine) -> None:
        if self.journal is not None:
            self.journal.append(line)

    async def note_listing(self, session: WorldSession, tools: list[str]) -> None:
        """Record that the session's client listed the tools (a failed write is logged: a listing is not a call,
        and refusing to list tools would break the client for a missing audit line)."""
        listing = ListingRecord(
            world=self.world.name, session=session.id, before_call=session.next_index, tools=tools
        )
        session.listings.append(listing)
        self._keep(listing)
        if self.writer is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(self.writer.write, listing)
                except (OSError, ValueError) as exc:
                    log.warning("tools/list not recorded in the trajectory: %s", exc)

    async def commit(self, session: WorldSession, record: CallRecord) -> None:
        """Write the record ahead (off the event loop), then add it to the session. If the write fails the
        session does not change and RecordingError says why; a cancellation cannot split the two steps."""
        with anyio.CancelScope(shield=True):
            if self.writer is not None:
                try:
                    await anyio.to_thread.run_sync(self.writer.write, record)
                except (OSError, ValueError) as exc:
                    raise RecordingError(f"the trajectory could not be written: {exc}") from exc
            self._keep(record)
            session.add(record)

    def resume(self, path: str | Path) -> int:
        """Load a recorded trajectory; the default session continues the last recorded one. Returns calls loaded."""
        count = 0
        last_session = None
        for record in read_lines(path):
            if record.world not in (None, self.world.name):
                continue
            key = (record.session or DEFAULT_SESSION)[:MAX_SESSION_KEY_CHARS]
            self._keep(record)
            if isinstance(record, ListingRecord):
                self.get(key).listings.append(record)
                continue
            self.get(key).restore(record)
            last_session, count = key, count + 1
        if last_session is not None:
            self.default_key = last_session
        return count
