"""One tool call on its way through the pipeline: the context that `simulator.py`, `fault_phases.py` and the fault
kinds (`fault_kinds.py`) pass along instead of loose values, and the one place its record is made.

It holds what was asked (tool, arguments, session, index), what the faults may read (the world's seed, injection
slots and live catalog), the faults that fire on it, and the log of their trajectory entries. It is frozen: what
the call comes to is the `Answer` each step returns (`answer.py`), never written back here. The fault log is the
one thing that grows, entry by entry as the phases decide them, so that a call cut short (cancelled by its client)
is still recorded with the faults it met.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aw_mcp.sim.answer import Answer, Generated
from aw_mcp.sim.fault_apply import Catalog
from aw_mcp.sim.fault_planner import Firing
from aw_mcp.sim.progress import Reporter
from aw_mcp.sim.session import WorldSession
from aw_mcp.spec.injections import InjectionSlot
from aw_mcp.spec.world import ToolSpec
from aw_mcp.trajectory.records import AnsweredBy, CallRecord, FaultEntry, utc_now

CANCELLED = "cancelled by the client"


@dataclass(frozen=True, eq=False, kw_only=True)
class Call:
    """One call's context, from the moment it is claimed to its commit."""

    # what was asked
    world: str
    tool: ToolSpec
    arguments: dict[str, Any]
    session: WorldSession
    index: int  # claimed when the call starts, so overlapping calls stay ordered
    report: Reporter | None = None
    time: str = field(default_factory=utc_now)
    notice: str | None = None  # the backend's label for all its answers (the demo backend's)
    answered_by: AnsweredBy = "model"  # who answers this call (an answer's own `generated.answered_by` wins)
    # what the faults read
    seed: int
    slots: Mapping[str, InjectionSlot]
    catalog: Catalog
    # the faults that fire on this call (spec order), and how each appears in the trajectory, as decided
    firings: tuple[Firing, ...] = ()
    faults: list[FaultEntry] = field(default_factory=list)

    @property
    def values(self) -> dict[str, Any]:
        """What a fault's `{placeholder}` templates may name: the arguments, and `tool`."""
        return {**self.arguments, "tool": self.tool.name}

    def log(self, entry: FaultEntry) -> FaultEntry:
        """A fault's trajectory entry, in the order the phases decide them."""
        self.faults.append(entry)
        return entry

    def record(self, answer: Answer | None, *, latency_ms: float) -> CallRecord:
        """The trajectory's record of this call from its final answer (None: the client gave up before there was
        one), with the faults it met."""
        generated = (answer.generated if answer is not None else None) or Generated()
        return CallRecord(
            world=self.world,
            session=self.session.id,
            index=self.index,
            tool=self.tool.name,
            arguments=self.arguments,
            time=self.time,
            messages_hash=generated.messages_hash,
            raw=generated.raw,
            reasoning=generated.reasoning,
            observation=answer.recorded_observation if answer is not None else None,
            structured=answer.structured if answer is not None else None,
            is_error=answer.is_error if answer is not None else False,
            latency_ms=latency_ms,
            error=answer.error if answer is not None else CANCELLED,
            faults=self.faults,
            attempts=generated.attempts,
            truth=answer.truth if answer is not None else None,
            in_history=answer.in_history if answer is not None else False,
            notice=generated.notice or self.notice,
            compacted=generated.compacted,
            forked_from=self.session.forked_from,
            answered_by=generated.answered_by or self.answered_by,  # type: ignore[arg-type]
            consistency=generated.consistency,
        )
