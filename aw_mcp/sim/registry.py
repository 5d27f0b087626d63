"""The world sessions of one server or `Env`, by key: bounded (idle ones evicted, least recently used first),
forked, resumed from a trajectory, each call's record committed to the trajectory file.

Sessions are owned: a session made by `get` owns itself, a fork belongs to its parent's owner (its family). Forks
make room only by evicting idle sessions of their own family, never another client's world: when the rest is
taken by other families the fork is refused (409 over HTTP). An evicted session is remembered (up to
MAX_REMEMBERED_EVICTIONS keys): the next call naming it is refused once with `SessionEvictedError`, saying why,
instead of silently running on an empty history; after that, the key starts a new world. Reads naming it (the
trajectory, faults and scorecard resources) are refused too but leave the notice for the call; a tool listing
lists the tools and records nothing."""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from aw_mcp.sim.session import DEFAULT_SESSION, RecordingError, SessionKeyError, WorldSession
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import (
    CallRecord,
    ForkPoint,
    ListingRecord,
    ShadowRecord,
    TrajectoryLine,
    TrajectoryWriter,
    read_lines,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_SESSIONS = 1000
DEFAULT_SESSION_TTL_S = 3600.0
MAX_SESSION_KEY_CHARS = 128
# How a 2025-era HTTP transport session's world is keyed (`http-<Mcp-Session-Id>`); other keys may not start so.
TRANSPORT_SESSION_PREFIX = "http-"
MAX_REMEMBERED_EVICTIONS = 10_000  # evicted keys whose owners are still told (oldest forgotten first)
# Forks made by one request (`POST /sessions/{id}/fork`, `Env.fork(n)`): 10^5 copies took 47 s and 451 MB.
MAX_FORKS_PER_REQUEST = 256


# Arguments past this many JSON values are rendered into the prompt and the history off the event loop (an
# indented JSON dump of 4,000 objects, in pure Python, takes half a second on a loaded machine).
BULKY_VALUES = 2000


def bulky(value: Any, limit: int = BULKY_VALUES) -> bool:
    """Whether a JSON value holds more than `limit` values (counting stops there: cheap for any size)."""
    stack, seen = [value], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and len(node) > limit * 16:  # a long text renders slowly too
            return True
    return False


class ForkPointError(ValueError):
    """`--at K` names a call the recorded session does not have."""


class SessionEvictedError(SessionKeyError):
    """The session a request names was evicted since its last request; its history is gone."""


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
        self._listed: list[dict[str, Any]] | None = None  # the tool definitions the trajectory last wrote
        self.max_sessions = max_sessions
        self.idle_ttl_s = idle_ttl_s
        self.clock = clock
        self._sessions: dict[str, WorldSession] = {}
        self._owners: dict[str, str] = {}  # session key -> the key of the session that started its family
        self._evicted: OrderedDict[str, str] = OrderedDict()  # evicted key -> why, until its owner is told
        self.default_key = DEFAULT_SESSION
        # Every line written or restored, across sessions (evicted ones included), when someone needs it at the
        # end (`aw-mcp serve --scorecard`); None: not kept.
        self.journal: list[TrajectoryLine] | None = None

    def get(self, key: str | None = None, consume_notice: bool = True) -> WorldSession:
        """The live session under `key`, made when there is none. For a key evicted since its last request this
        raises SessionEvictedError; `consume_notice` False (a read: the trajectory, the faults, a scorecard)
        raises it without using the notice up, so it is the owner's next call that is told and refused."""
        key = key or self.default_key
        if len(key) > MAX_SESSION_KEY_CHARS:
            raise SessionKeyError(
                f"session key is {len(key):,} characters; at most {MAX_SESSION_KEY_CHARS} allowed"
            )
        now = self.clock()
        self.evict_idle(now)
        session = self._sessions.get(key)
        if session is None:
            why = self._evicted.pop(key, None) if consume_notice else self._evicted.get(key)
            if why is not None:  # a call is told once; the call after it starts a new world under the key
                then = (
                    "this request was not run, and the next one naming this session starts a new, empty world"
                    if consume_notice
                    else "its next tool call is refused the same way, and the one after starts a new, empty world"
                )
                raise SessionEvictedError(
                    f"world session {key!r} is gone: {why}. Its history cannot be recovered; {then}"
                )
            if len(self._sessions) >= self.max_sessions and not self._evict_oldest_idle(
                f"it was the least recently used idle session when the server (--max-sessions "
                f"{self.max_sessions}) needed room for a new one"
            ):
                raise SessionKeyError(
                    f"too many live world sessions ({self.max_sessions}); end one (DELETE) or wait for one to idle out"
                )
            session = self._sessions[key] = WorldSession(self.world, key)
            self._owners[key] = key
        session.last_used = now
        return session

    def evicted(self, key: str | None) -> bool:
        """Whether `key` names a session evicted since its last request (its owner not told yet)."""
        return (key or self.default_key) in self._evicted and (key or self.default_key) not in self._sessions

    def owner(self, key: str) -> str:
        """The key of the session that started `key`'s family (itself, unless it is a fork)."""
        return self._owners.get(key, key)

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
            self._evict(key, f"it was idle for more than {self.idle_ttl_s:g} s (--session-ttl)")
        return len(stale)

    def _evict(self, key: str, why: str) -> None:
        del self._sessions[key]
        self._owners.pop(key, None)
        self._evicted[key] = why
        self._evicted.move_to_end(key)
        while len(self._evicted) > MAX_REMEMBERED_EVICTIONS:
            self._evicted.popitem(last=False)

    def _evict_oldest_idle(self, why: str) -> bool:
        """Evict the least recently used idle session; False when there is none."""
        idle = [(s.last_used, k) for k, s in self._sessions.items() if k != self.default_key and not s.busy]
        if not idle:
            return False
        self._evict(min(idle)[1], why)
        return True

    def fork(self, key: str, n: int) -> list[WorldSession]:
        """`n` new sessions, each an independent copy of session `key` at its current point, in `key`'s family.
        Forks count against `max_sessions` like any session, and make room only by evicting idle sessions of
        their own family: all or none are made (SessionKeyError when the rest is other clients' worlds). For
        many forks from async code: `fork_snapshot`, the copies off the loop, `take_forks`."""
        snapshot = self.fork_snapshot(key, n)
        children = [snapshot.fork(self.new_key()) for _ in range(n)]
        self.take_forks(key, children)
        return children

    def fork_snapshot(self, key: str, n: int) -> WorldSession:
        """A copy of session `key` to fork `n` sessions from (`snapshot.fork(registry.new_key())` each, anywhere:
        nobody else holds it, so later calls on `key` do not reach the copies), once there is room for them.
        Raises KeyError (no such session) or SessionKeyError (n out of range, no room)."""
        parent = self._sessions.get(key)
        if parent is None:
            raise KeyError(key)
        if not 1 <= n <= MAX_FORKS_PER_REQUEST:
            raise SessionKeyError(f"a fork makes 1 to {MAX_FORKS_PER_REQUEST} sessions at a time, not {n:,}")
        self._make_room(key, n)
        return parent.fork(parent.id)

    def take_forks(self, key: str, children: list[WorldSession]) -> None:
        """Register forks of `key` (made from its `fork_snapshot`) in its family, all or none: room is checked
        again, as other sessions may have started while they were copied."""
        if key not in self._sessions:
            raise SessionKeyError(f"world session {key!r} ended while it was being forked")
        self._make_room(key, len(children))
        family = self.owner(key)
        now = self.clock()
        for child in children:
            child.last_used = now
            self._sessions[child.id] = child
            self._owners[child.id] = family

    def _make_room(self, key: str, n: int) -> None:
        """Room for `n` forks of `key`, evicting only idle sessions of its family (least recently used first);
        SessionKeyError, evicting nothing, if that is not enough (a fork never evicts another client's world)."""
        self.evict_idle()
        family = self.owner(key)
        self._sessions[key].last_used = self.clock()
        needed = len(self._sessions) + n - self.max_sessions
        if needed <= 0:
            return
        own = sorted(
            (s.last_used, k)
            for k, s in self._sessions.items()
            if k not in (self.default_key, key) and not s.busy and self.owner(k) == family
        )
        if len(own) < needed:
            raise SessionKeyError(
                f"no room for {n} forked session(s): {len(self._sessions)} of {self.max_sessions} live "
                f"(--max-sessions), {len(own)} of them idle ones of this session's own family; a fork never "
                "evicts another client's world: end some of your forks (DELETE) or wait for sessions to idle out"
            )
        for _, victim in own[:needed]:
            self._evict(
                victim, f"it was the least recently used idle fork of its family when {n} more were made"
            )

    def adopt(self, session: WorldSession) -> None:
        """Take in a session made elsewhere (a fork that gets a simulator of its own, aw_mcp.env)."""
        self._sessions[session.id] = session

    def drop(self, key: str) -> bool:
        """Forget a session and its world (its trajectory lines stay on disk); its owner asked, so it is not
        remembered as evicted."""
        self._owners.pop(key, None)
        self._evicted.pop(key, None)
        return self._sessions.pop(key, None) is not None

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[WorldSession]:
        return list(self._sessions.values())

    def new_key(self) -> str:
        return uuid.uuid4().hex[:12]

    def _keep(self, line: TrajectoryLine) -> None:
        if self.journal is not None:
            self.journal.append(line)

    async def note_listing(
        self, session: WorldSession, tools: list[str], definitions: list[dict[str, Any]] | None = None
    ) -> None:
        """Record that the session's client listed the tools (a failed write is logged: a listing is not a call,
        and refusing to list tools would break the client for a missing audit line). The tools' `definitions`
        are written when they differ from those the trajectory last wrote."""
        changed = definitions is not None and definitions != self._listed
        if changed:
            self._listed = definitions
        listing = ListingRecord(
            world=self.world.name,
            session=session.id,
            before_call=session.next_index,
            tools=tools,
            definitions=definitions if changed else None,
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
            if bulky(record.arguments):  # the history renders the turn: off the loop for big arguments
                await anyio.to_thread.run_sync(session.add, record)
            else:
                session.add(record)

    def resume(self, path: str | Path, at: int | None = None) -> int:
        """Load a recorded trajectory; the default session continues the last recorded one. Returns calls loaded.

        A forked session's lines (`forked_from`) are restored on top of their parent's calls before the fork point.
        `at`: keep only the first `at` calls of that last session, and continue in a fork of it at that point
        (the replay of a recorded incident, then new continuations; the file's later lines stay untouched)."""
        count = 0
        last_session = None
        for record in read_lines(path):
            if record.world not in (None, self.world.name) or isinstance(record, ShadowRecord):
                continue  # a shadow prediction is calibration's, never the session's history
            key = (record.session or DEFAULT_SESSION)[:MAX_SESSION_KEY_CHARS]
            self._keep(record)
            if isinstance(record, ListingRecord):
                self.get(key).listings.append(record)
                continue
            if key not in self._sessions and record.forked_from is not None:
                self._restore_fork_point(key, record.forked_from)
            self.get(key).restore(record)
            last_session, count = key, count + 1
        if last_session is not None:
            self.default_key = last_session
        if at is not None:
            if last_session is None:
                raise ForkPointError(f"{path}: no recorded call to continue from")
            self.default_key = self._fork_at(last_session, at).id
        return count

    def _restore_fork_point(self, key: str, point: ForkPoint) -> None:
        parent = self._sessions.get(point.session[:MAX_SESSION_KEY_CHARS])
        session = self.get(key)
        self._owners[key] = self.owner(point.session[:MAX_SESSION_KEY_CHARS])  # in its parent's family
        session.forked_from = point
        for record in parent.records if parent is not None else []:
            if record.index < point.call:
                session.restore(record)

    def _fork_at(self, key: str, at: int) -> WorldSession:
        source = self._sessions[key]
        if not 0 <= at <= source.next_index:
            raise ForkPointError(f"--at {at}: the recorded session has calls 1-{source.next_index}")
        trimmed = WorldSession(self.world, key, now=source.now)
        trimmed.forked_from = source.forked_from
        for record in sorted(source.records, key=lambda r: r.index):
            if record.index < at:
                trimmed.restore(record)
        child = trimmed.fork(self.new_key())
        self._sessions[child.id] = child
        return child
