"""The ledger: what earlier calls of a world session established, given to the world model as notes only where
the conversation it sees does not already show it.

The kept turns already hold every observation, so a call whose turn is in the prompt gets no entry. What the
prompt does not show, and the ledger gives:
- a counterfactual fault's change (no observation states it outright) and a wrong-content fault's truth, always;
- after compaction (WorldSession.fit), what the left-out turns established: the ids and states a call created
  or read, one JSON object per call, numbered as the transcript numbers turns (`### Turn N`; a call that never
  became a turn, such as one with invalid arguments, has no number and establishes nothing). Bounded by
  LEDGER_CHARS: the oldest reads go first, writes last, so a write compaction removed from the history stays.
Screen domains keep only the fault entries: the current screen already shows what earlier actions did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aw_mcp.prompt.budget import clip_value
from aw_mcp.prompt.parse import parse_json_observation
from aw_mcp.spec.world import ToolSpec
from aw_mcp.trajectory.records import CallRecord

LEDGER_STRING_CHARS = 200  # an argument string as the ledger quotes it
LEDGER_CHARS = 12_000  # the left-out turns' entries in one prompt (~4,000 tokens); faults are not counted
_KEY_FIELDS = ("status", "state")
LEDGER_HEADER = "What the turns left out established (JSON, one call per line, numbered by turn):"


def _key_values(value: Any, limit: int = 6) -> dict[str, Any]:
    """Identifiers and status fields at the top level and one level down (where APIs put the created object)."""
    found: dict[str, Any] = {}
    levels = [value] if isinstance(value, dict) else []
    if isinstance(value, dict):
        levels += [v for v in value.values() if isinstance(v, dict)]
    for level in levels:
        for key, item in level.items():
            if isinstance(item, dict | list) or item is None:
                continue
            lowered = key.lower()
            if lowered == "id" or lowered.endswith("_id") or key.endswith("Id") or lowered in _KEY_FIELDS:
                found.setdefault(key, item)
            if len(found) >= limit:
                return found
    return found


def _established(record: CallRecord) -> Any:
    """The ids and states the call's answer holds, else its first line."""
    value = record.structured
    if value is None and record.observation:
        try:
            value = parse_json_observation(record.observation)
        except ValueError:
            value = None
    pairs = _key_values(value) if value is not None else {}
    if pairs:
        return pairs
    first = (record.truth or record.observation or "").strip().splitlines()
    return first[0][:160] if first else ""


@dataclass(frozen=True)
class Entry:
    """One ledger line. `turn`: the call's turn number (None: it never became a turn); `since`: the first turn
    the entry concerns (a fault holds from there on)."""

    index: int  # the call's index in the session
    since: int
    text: str
    kind: str  # "fault", "write" or "read"
    turn: int | None = None


def record_entries(
    record: CallRecord, turn: int | None, next_turn: int, tool: ToolSpec | None
) -> list[Entry]:
    """What one committed call adds to the ledger: the faults that changed the world, then (a call the world took
    in, as turn `turn`) what it established. `next_turn`: the number of the turn after it."""
    since = turn if turn is not None else next_turn
    entries: list[Entry] = []
    for fault in record.applied_faults():
        if fault.kind == "counterfactual":
            text = f"From turn {since} on, this holds in the world: {fault.instruction}"
            entries.append(Entry(record.index, since, text, "fault", turn))
        elif fault.kind == "wrong_content" and record.truth is None and turn is not None:
            text = (
                f"Turn {turn} ({record.tool}) deliberately showed wrong content ({fault.instruction}); "
                "the true state did not change."
            )
            entries.append(Entry(record.index, since, text, "fault", turn))
    if turn is None or record.is_error or record.observation is None:
        return entries
    read_only = tool is not None and tool.annotations is not None and tool.annotations.readOnlyHint is True
    line = {
        "turn": turn,
        "tool": record.tool,
        "arguments": clip_value(record.arguments, LEDGER_STRING_CHARS),
        "established": _established(record),
    }
    text = json.dumps(line, ensure_ascii=False, sort_keys=False)
    entries.append(Entry(record.index, turn, text, "read" if read_only else "write", turn))
    return entries


def compaction_note(first_kept_turn: int, calls_left_out: int, keeps_ledger: bool, task: str | None) -> str:
    """The note a compacted prompt opens its notes with, naming what this domain keeps of the left-out turns."""
    turns = "Turn 1 is" if first_kept_turn == 2 else f"Turns 1-{first_kept_turn - 1} are"
    text = (
        f"{turns} left out of this conversation to fit the context ({calls_left_out} earlier call(s)); the "
        "world is still as they left it."
    )
    if keeps_ledger:
        text += " The ledger below lists what they established."
    if task:
        text += f" The agent's task, as turn 1 gave it: {task.strip()}"
    return text


class Ledger:
    """A session's ledger, kept up to date one committed record at a time (records are append-only), so the notes
    for call 500 cost what they cost for call 5."""

    def __init__(self, include_calls: bool = True):
        self.include_calls = include_calls
        self._pending: list[tuple[CallRecord, int | None, int]] = []  # committed, entries not yet made
        self._entries: list[Entry] = []

    def copy(self) -> Ledger:
        twin = Ledger(self.include_calls)
        twin._pending, twin._entries = list(self._pending), list(self._entries)
        return twin

    def add(self, record: CallRecord, turn: int | None, next_turn: int) -> None:
        """A committed call: its turn number (None when it did not enter the history) and the next one's."""
        self._pending.append((record, turn, next_turn))

    def entries(self, tool_of: Callable[[str], ToolSpec | None]) -> list[Entry]:
        """Every entry so far, in turn order (the tool's annotations are read when its entry is made)."""
        for record, turn, next_turn in self._pending:
            made = record_entries(record, turn, next_turn, tool_of(record.tool))
            self._entries += [e for e in made if self.include_calls or e.kind == "fault"]
        self._pending.clear()
        self._entries.sort(key=lambda e: (e.since, e.index))  # overlapping calls commit out of order
        return list(self._entries)


def ledger_notes(entries: list[Entry], first_kept_turn: int, limit: int = LEDGER_CHARS) -> list[str]:
    """The notes for a prompt whose first kept turn is `first_kept_turn` (1: nothing left out): every fault entry,
    then the left-out turns' entries, within `limit` characters (the oldest reads dropped first, writes last)."""
    faults = [e.text for e in entries if e.kind == "fault"]
    left_out = [e for e in entries if e.kind != "fault" and e.turn is not None and e.turn < first_kept_turn]
    size = sum(len(e.text) + 3 for e in left_out)
    dropped = 0
    for kind in ("read", "write"):
        for entry in [e for e in left_out if e.kind == kind]:
            if size <= limit:
                break
            left_out.remove(entry)
            size -= len(entry.text) + 3
            dropped += 1
    notes = list(faults)
    if left_out:
        more = f" ({dropped} older entr{'y' if dropped == 1 else 'ies'} not listed: the ledger is bounded)"
        notes.append(LEDGER_HEADER + (more if dropped else "") + "".join(f"\n  {e.text}" for e in left_out))
    return notes
