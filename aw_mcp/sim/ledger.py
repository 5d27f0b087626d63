"""The ledger: what earlier calls of a world session established, given to the world model as notes.

The history already holds every earlier observation, but a long history buries the ids and values a write call
created, and a counterfactual fault changes the world in a way no observation states outright. The ledger lists
both, derived from the session's records, so a counterfactual world stays self-consistent across calls.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from typing import Any

from aw_mcp.prompt.budget import clip_value
from aw_mcp.prompt.parse import parse_json_observation
from aw_mcp.spec.world import ToolSpec
from aw_mcp.trajectory.records import CallRecord

MAX_ENTRIES = 20
LEDGER_STRING_CHARS = 200  # an argument string as the ledger quotes it
_KEY_FIELDS = ("status", "state")


def _key_values(value: Any, limit: int = 6) -> list[str]:
    """Identifiers and status fields at the top level and one level down (where APIs put the created object)."""
    found: list[str] = []
    levels = [value] if isinstance(value, dict) else []
    if isinstance(value, dict):
        levels += [v for v in value.values() if isinstance(v, dict)]
    for level in levels:
        for key, item in level.items():
            if isinstance(item, dict | list) or item is None:
                continue
            lowered = key.lower()
            if lowered == "id" or lowered.endswith("_id") or key.endswith("Id") or lowered in _KEY_FIELDS:
                found.append(f"{key}={json.dumps(item, ensure_ascii=False)}")
            if len(found) >= limit:
                return found
    return found


def _established(record: CallRecord) -> str:
    value = record.structured
    if value is None and record.observation:
        try:
            value = parse_json_observation(record.observation)
        except ValueError:
            value = None
    pairs = _key_values(value) if value is not None else []
    if pairs:
        return ", ".join(pairs)
    first = (record.truth or record.observation or "").strip().splitlines()
    line = first[0] if first else ""
    return f"returned {line[:160]!r}"


def record_entries(
    record: CallRecord, tool_of: Callable[[str], ToolSpec | None], include_writes: bool = True
) -> list[str]:
    """What one committed call adds to the ledger: the faults that changed the world, then (for a write call
    the world took in) the ids and states it established."""
    number = record.index + 1
    entries: list[str] = []
    for fault in record.applied_faults():
        if fault.kind == "counterfactual":
            entries.append(f"Since call #{number} this holds in the world: {fault.instruction}")
        elif fault.kind == "wrong_content" and record.truth is None:
            entries.append(
                f"Call #{number} ({record.tool}) deliberately showed wrong content ({fault.instruction}); "
                "the true state did not change."
            )
    if not include_writes or record.error is not None or record.is_error or record.observation is None:
        return entries
    if not record.in_history:
        return entries
    tool = tool_of(record.tool)
    if tool is not None and tool.annotations is not None and tool.annotations.readOnlyHint is True:
        return entries
    arguments = json.dumps(
        clip_value(record.arguments, LEDGER_STRING_CHARS), ensure_ascii=False, sort_keys=True
    )
    entries.append(f"Call #{number} {record.tool} {arguments} established: {_established(record)}")
    return entries


def format_notes(entries: Sequence[str]) -> list[str]:
    if not entries:
        return []
    return ["Ledger of what earlier calls established (stay consistent with it):", *entries[-MAX_ENTRIES:]]


def ledger_notes(
    records: Sequence[CallRecord], tool_of: Callable[[str], ToolSpec | None], include_writes: bool = True
) -> list[str]:
    """Notes for the next action turn, oldest first, at most MAX_ENTRIES. `include_writes=False` keeps only the
    fault-made changes (screen domains: the current screen already carries what earlier actions did)."""
    entries: list[str] = []
    for record in sorted(records, key=lambda r: r.index):
        entries += record_entries(record, tool_of, include_writes)
    return format_notes(entries)


class Ledger:
    """A session's ledger, kept up to date one committed record at a time (records are append-only), so the notes
    for call 500 cost what they cost for call 5. Same notes as `ledger_notes` over the same records."""

    def __init__(self, include_writes: bool = True):
        self.include_writes = include_writes
        self._seen = 0
        self._entries: list[tuple[int, int, str]] = []  # (call index, order within the call, entry)

    def copy(self) -> Ledger:
        twin = Ledger(self.include_writes)
        twin._seen, twin._entries = self._seen, list(self._entries)
        return twin

    def notes(self, records: Sequence[CallRecord], tool_of: Callable[[str], ToolSpec | None]) -> list[str]:
        for record in records[self._seen :]:
            for order, entry in enumerate(record_entries(record, tool_of, self.include_writes)):
                bisect.insort(
                    self._entries, (record.index, order, entry)
                )  # overlapping calls commit out of order
        self._seen = len(records)
        return format_notes([entry for _, _, entry in self._entries[-MAX_ENTRIES:]])
