"""One tool call on its way through the pipeline: the context that `simulator.py`, `perturb/phases.py` and the
fault kinds (`perturb/kinds.py`) pass along instead of loose values, and the one place its record is made.

It holds what was asked (tool, arguments, session, index), what the faults may read or change (the world's seed,
injection slots and live catalog), the faults that fired and their trajectory entries, the world model's attempts,
and what the agent will see. The trajectory's `CallRecord` is built from it once, when the call commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aw_mcp.sim.fault_apply import Catalog
from aw_mcp.sim.fault_planner import Firing
from aw_mcp.sim.progress import Reporter
from aw_mcp.sim.session import WorldSession
from aw_mcp.spec.injections import InjectionSlot
from aw_mcp.spec.world import ToolSpec
from aw_mcp.trajectory.records import CallRecord, FaultEntry, utc_now


@dataclass(eq=False, kw_only=True)
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
    # what the faults read or change
    seed: int
    slots: Mapping[str, InjectionSlot]
    catalog: Catalog
    # the faults: those that fired (spec order), and how each appears in the trajectory
    firings: list[Firing] = field(default_factory=list)
    faults: list[FaultEntry] = field(default_factory=list)
    # the world model's attempts
    notes: list[str] | None = None  # what earlier calls established, read once, at the first generation
    messages_hash: str | None = None
    compacted: int = 0
    attempts: int = 0
    raw: str | None = None
    reasoning: str | None = None
    notice: str | None = None  # set when the answers are not the world model's (the demo backend)
    # what the agent will see (None: the outcome's text) and what the world keeps
    observation: str | None = None
    structured: Any = None
    truth: str | None = None  # the world model's own observation, when a fault changed what the agent saw
    in_history: bool = True
    error: str | None = None

    @property
    def values(self) -> dict[str, Any]:
        """What a fault's `{placeholder}` templates may name: the arguments, and `tool`."""
        return {**self.arguments, "tool": self.tool.name}

    def record(self, *, latency_ms: float, is_error: bool = False, shown: str | None = None) -> CallRecord:
        """The trajectory's record of this call, as it stands (`shown`: the text the agent got, recorded as the
        observation when the call set none)."""
        return CallRecord(
            world=self.world,
            session=self.session.id,
            index=self.index,
            tool=self.tool.name,
            arguments=self.arguments,
            time=self.time,
            messages_hash=self.messages_hash,
            raw=self.raw,
            reasoning=self.reasoning,
            observation=self.observation if self.observation is not None else shown,
            structured=self.structured,
            is_error=is_error,
            latency_ms=latency_ms,
            error=self.error,
            faults=self.faults,
            attempts=self.attempts,
            truth=self.truth,
            in_history=self.in_history,
            notice=self.notice,
            compacted=self.compacted,
            forked_from=self.session.forked_from,
        )
