"""A world session: the history one simulated world keeps between calls (its trajectory lines: trajectory/records.py).

The registry that holds the sessions of a server or an `Env` is `registry.py`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from aw_mcp.prompt.budget import (
    HISTORY_OBSERVATION_CHARS,
    clip_text,
    clip_value,
    estimate_tokens,
)
from aw_mcp.prompt.render import Turn
from aw_mcp.prompt.transcript import Prompt, Transcript
from aw_mcp.sim.ledger import Entry, Ledger, compaction_note, ledger_notes
from aw_mcp.spec.domains import TASK_DOMAINS
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import (
    CallRecord,
    ForkPoint,
    ListingRecord,
    utc_now,
)

log = logging.getLogger(__name__)

DEFAULT_SESSION = "default"


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
        self.ledger = Ledger(include_calls=world.domain == "mcp")
        self.turn_calls: list[int] = []  # the call index of each history turn (turn N: turn_calls[N - 1])
        self.records: list[CallRecord] = []
        self.listings: list[ListingRecord] = []  # the tools/list requests answered in this session
        self._next_index = 0
        self.compacted = 0  # earliest history turns no longer shown to the world model (only grows: `fit`)
        self.busy = 0  # calls in flight: a busy session is never evicted
        self.last_used = time.monotonic()
        self.forked_from: ForkPoint | None = None  # set on a fork: its new records say where they came from

    def fork(self, session_id: str) -> WorldSession:
        """An independent copy at this point: history, ledger, records, clock and call index; from here on each
        diverges on its own. Records are never changed after commit, so the copies share them."""
        if self.busy:
            raise SessionKeyError(f"session {self.id!r} has a call in flight: fork it between calls")
        child = WorldSession(self.world, session_id, now=self.now)
        child.now = self.now
        child.transcript = self.transcript.copy()
        child.ledger = self.ledger.copy()
        child.turn_calls = list(self.turn_calls)
        child.records = list(self.records)
        child.listings = list(self.listings)
        child._next_index = self._next_index
        child.compacted = self.compacted
        child.forked_from = ForkPoint(session=self.id, call=self._next_index)
        return child

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
        turn = None
        if record.observation is not None and record.error is None and record.in_history:
            seen = record.truth if record.truth is not None else record.observation
            arguments = clip_value(record.arguments)
            self.transcript.append(Turn(record.tool, arguments, clip_text(seen, HISTORY_OBSERVATION_CHARS)))
            turn = len(self.transcript.turns)
            self.turn_calls.append(record.index)
        self.ledger.add(record, turn, len(self.transcript.turns) + 1)

    def calls_before_turn(self, number: int) -> int:
        """How many of the session's calls came before turn `number` (1-based), turns or not."""
        if number > len(self.turn_calls):
            return self._next_index
        return self.turn_calls[number - 1]

    @property
    def history(self) -> list[Turn]:
        """The calls the world took in, in commit order: what the world model is shown (read-only)."""
        return self.transcript.turns

    def restore(self, record: CallRecord) -> None:
        """Replay a recorded call into this session (for --resume)."""
        self._next_index = max(self._next_index, record.index + 1)
        self.add(record)

    # --- compaction: what of the history the world model is shown --------------------------------------------------

    def fit(
        self,
        system_prompt: str,
        tool: str,
        arguments: dict[str, Any],
        notes: Sequence[str],
        budget: int,
        ledger: Sequence[Entry] = (),
    ) -> tuple[Prompt, int] | None:
        """The prompt for a call with as much recent history as fits `budget` tokens (the oldest turns go first, a
        note says so and the `ledger` entries say what they established), and the first turn it shows; None when
        not even the prompt without history fits. Compaction only grows, so later prompts share a prefix."""
        start = min(self.compacted, len(self.history))
        while True:
            shown_notes = [*self.history_notes(start, ledger), *notes]
            prompt = self.transcript.prompt(system_prompt, tool, arguments, shown_notes, start=start)
            if estimate_tokens(prompt.messages, prompt.chars) <= budget:
                break
            if start >= len(self.history):
                return None
            # Drop at least a quarter of what is shown, so a long session compacts in a few steps, not thousands.
            start += max(1, (len(self.history) - start) // 4)
        self.compacted = max(self.compacted, start)
        return prompt, start

    def history_notes(self, start: int, ledger: Sequence[Entry]) -> list[str]:
        """What a prompt showing the turns from index `start` on does not show (sim/ledger.py): the compaction
        note, then the ledger's notes."""
        notes = []
        if start:
            task = self.world.task if self.world.domain in TASK_DOMAINS else None
            calls = self.calls_before_turn(start + 1)
            notes.append(compaction_note(start + 1, calls, self.ledger.include_calls, task))
        return notes + ledger_notes(list(ledger), start + 1)

    def overflowed(self) -> None:
        """The model's server counted more tokens than the estimate: show it half the remaining turns next time."""
        shown = len(self.history) - self.compacted
        self.compacted += max(1, (shown + 1) // 2) if shown else 0


class SessionKeyError(ValueError):
    """A session key the registry refuses (too long), or no room for another live session."""


class RecordingError(RuntimeError):
    """The trajectory could not be written; the call is not committed."""
