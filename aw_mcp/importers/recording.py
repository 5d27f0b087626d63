"""`aw-mcp import recording TRAJECTORY`: a recorded session (of `aw-mcp mirror`, or of a world) as a world file.

The catalog is the tools as the trajectory's `tools_list` lines listed them (their definitions: the last listing
of each tool wins); a tool called but never listed with its definition (a trajectory of an older aw-mcp) gets a
schema that takes any object, with a warning. The tools' examples are the real calls, answered and not failed (the
first few distinct argument sets per tool, a real server's answers first): the demonstrations the prompt carries.
The state is what the answers established, read as the consistency guard reads them (sim/consistency.py): each
entity (a JSON object with an `id`) with the fields it was last seen with, and the ids that were deleted.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from aw_mcp.backends.replay import call_key
from aw_mcp.importers.import_log import ImportLog, json_pointer
from aw_mcp.importers.mcp_catalog import Catalog, world_from_catalog
from aw_mcp.importers.world_file import ImportFailure
from aw_mcp.sim.consistency import (
    argument_values,
    entities,
    json_value,
    marked_deleted,
    says_deleted,
    scalars,
)
from aw_mcp.trajectory.records import CallRecord, ListingRecord, TrajectoryFormatError, read_lines

EXAMPLES_PER_TOOL = 3  # enough to show the answers' form; the prompt carries every example of every tool
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def _answer(record: CallRecord) -> str | None:
    """The system's own answer to a call (before any fault changed it), or None when it has none to show."""
    if record.error is not None or record.is_error:
        return None
    if record.truth is not None:
        return record.truth
    return record.observation if record.in_history else None


def examples(calls: list[CallRecord]) -> dict[str, list[dict[str, Any]]]:
    """Per tool, the first EXAMPLES_PER_TOOL distinct calls with an answer, a real server's before others."""
    chosen: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for record in sorted(calls, key=lambda r: r.answered_by != "upstream"):  # stable: recorded order kept
        answer = _answer(record)
        key = call_key(record.tool, record.arguments)
        if answer is None or key in seen or len(chosen[record.tool]) >= EXAMPLES_PER_TOOL:
            continue
        seen.add(key)
        result = record.structured if record.structured is not None and record.truth is None else answer
        chosen[record.tool].append({"arguments": record.arguments, "result": result})
    return dict(chosen)


def established_state(
    calls: list[CallRecord], read_only: frozenset[str] = frozenset()
) -> dict[str, Any] | None:
    """What the answers established: every entity as last seen, and the ids deleted (by a write: a tool not in
    `read_only`, as the consistency guard reads them); None when nothing."""
    seen: dict[str, dict[str, Any]] = {}
    deleted: list[str] = []

    def delete(ident: str) -> None:
        seen.pop(ident, None)
        if ident not in deleted:
            deleted.append(ident)

    for record in sorted(calls, key=lambda r: (r.session or "", r.index)):
        answer = _answer(record)
        value = json_value(answer, record.structured if record.truth is None else None)
        for ident, obj in entities(value):
            if marked_deleted(obj):
                delete(ident)
                continue
            if ident in deleted:
                deleted.remove(ident)
            seen.setdefault(ident, {"id": obj["id"]}).update(scalars(obj))
        named = {v for v in argument_values(record.arguments) if v in seen}
        writes = record.tool not in read_only
        if writes and answer is not None and len(named) == 1 and says_deleted(value, answer):
            delete(named.pop())
    if not seen and not deleted:
        return None
    state: dict[str, Any] = {"records": list(seen.values())}
    if deleted:
        state["deleted_ids"] = deleted
    return state


def catalog_of(path: str | Path, log: ImportLog) -> tuple[Catalog, list[CallRecord]]:
    try:
        lines = list(read_lines(path))
    except TrajectoryFormatError as exc:
        raise ImportFailure(str(exc)) from None
    calls = [line for line in lines if isinstance(line, CallRecord) and line.error != "unknown tool"]
    listed: dict[str, dict[str, Any]] = {}
    for line in lines:
        if isinstance(line, ListingRecord) and line.definitions:
            for tool in line.definitions:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    listed[tool["name"]] = tool
    for record in calls:
        if record.tool not in listed:
            log.warn(
                json_pointer("tools", record.tool),
                "called but never listed with its definition (no tools/list line carries it): its inputSchema "
                "takes any object; edit it",
            )
            listed[record.tool] = {"name": record.tool, "description": "", "inputSchema": ANY_OBJECT}
    if not listed:
        raise ImportFailure(f"{path}: no tools/list line with definitions and no calls: nothing to import")
    worlds = {line.world for line in lines if line.world}
    name = sorted(worlds)[0] if len(worlds) == 1 else Path(path).stem
    catalog = Catalog(
        source=Path(path).name, tools=list(listed.values()), server_name=name, samples=examples(calls)
    )
    return catalog, calls


def import_recording(path: str | Path, log: ImportLog) -> dict[str, Any]:
    """The world (a dict, as the other importers return it) of a recorded trajectory."""
    catalog, calls = catalog_of(path, log)
    world = world_from_catalog(catalog, log)
    world["description"] = (
        f"A simulation of what {catalog.server_name} did in the recording {catalog.source}: its tools as listed, "
        f"its real calls as examples ({len(calls)} call(s) recorded) and what they established as the state."
    )
    read_only = frozenset(
        tool["name"]
        for tool in catalog.tools
        if isinstance(tool.get("annotations"), dict) and tool["annotations"].get("readOnlyHint") is True
    )
    state = established_state(calls, read_only)
    if state is not None:
        world["state"] = state
    return world
