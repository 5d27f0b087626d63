"""The call pipeline with a real MCP server answering (`aw-mcp mirror`): the simulator's own, with the upstream where
the world model would be.

Everything else is the simulated world's: arguments checked against the upstream's schemas, the perturbations
planned and applied by the same fault phases (a delay before the call, an error or hang instead of it, a stale
answer, shape and injection faults on the real answer, catalog changes), the record committed once and graded by the
same scorecard. The one difference is the source of the answer, which the record says (`answered_by: upstream`).
With a `Shadow`, the world model also predicts each real answer from the prompt the simulated world would have built
(shadow.py), off the agent's path.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from aw_mcp.backends.upstream import Upstream, UpstreamError, UpstreamRefusal, result_text
from aw_mcp.sim.answer import Answer, Generated
from aw_mcp.sim.call import Call
from aw_mcp.sim.ledger import Entry
from aw_mcp.sim.progress import Reporter
from aw_mcp.sim.session import WorldSession
from aw_mcp.sim.shadow import Shadow
from aw_mcp.sim.simulator import CallOutcome, OnCommit, Simulator
from aw_mcp.spec.world import ToolSpec

UPSTREAM = Generated(answered_by="upstream")
# Fault kinds whose answer the world model writes from notes (wrong_content, counterfactual): a mirror needs a model
# for them (--shadow's), since a real server cannot be told to answer otherwise.
INSTRUCTED_KINDS = ("wrong_content", "counterfactual")


class MirrorSimulator(Simulator):
    """`Simulator` whose answers come from `upstream`; its `backend` is the world model of `shadow` (and of the
    instructed faults), or an unused one when there is no shadow."""

    checks_arguments = False  # the real server judges them: its own answer to bad arguments is the answer

    def __init__(
        self,
        *args: Any,
        upstream: Upstream,
        shadow: Shadow | None = None,
        names: dict[str, str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.upstream = upstream
        self.shadow = shadow
        self.names = names or {}  # a world tool's upstream name, where the world had to rename it
        # The upstream's answer of each call in flight: a second ask for the same call is an instructed fault's.
        self._real: weakref.WeakKeyDictionary[Call, Answer] = weakref.WeakKeyDictionary()

    def _start(
        self, tool: ToolSpec, arguments: dict[str, Any], session: WorldSession, report: Reporter | None
    ) -> Call:
        # No backend label: the answers are the real server's.
        return replace(super()._start(tool, arguments, session, report), notice=None, answered_by="upstream")

    async def _commit(self, call: Call, on_commit: OnCommit | None) -> CallOutcome:
        try:
            return await super()._commit(call, on_commit)
        finally:  # committed, or never will be: its prediction may be written now
            if self.shadow is not None:
                self.shadow.committed(call.session.id, call.index)

    async def _generate(self, call: Call, notes: list[str], ledger: Sequence[Entry] = ()) -> Answer:
        real = self._real.get(call)
        if real is not None:  # an instructed fault: the world model rewrites the real answer it was shown
            return await super()._generate(call, notes, ledger)
        if self.shadow is not None:
            quiet = replace(call, report=None)  # the agent hears no progress of a prediction
            self.shadow.predict(quiet, lambda: Simulator._generate(self, quiet, notes, ledger))
        answer = await self.forward(call)
        self._real[call] = answer
        return answer

    async def forward(self, call: Call) -> Answer:
        """The upstream's answer to the call: its result, its JSON-RPC error, or an isError saying why there is
        none (it exited, hung past the deadline, wrote garbage)."""
        try:
            result = await self.upstream.call_tool(
                self.names.get(call.tool.name, call.tool.name), call.arguments
            )
        except UpstreamRefusal as exc:
            return Answer(
                exc.message,
                is_error=True,
                error=f"upstream error {exc.code}: {exc.message}",
                protocol_error=(exc.code, exc.message),
                in_history=False,
                generated=UPSTREAM,
            )
        except UpstreamError as exc:
            return Answer(str(exc), is_error=True, error=str(exc), in_history=False, generated=UPSTREAM)
        text = result_text(result)
        return Answer(
            text,
            structured=result.structured_content,
            is_error=bool(result.is_error),
            content=(text, tuple(result.content)),
            generated=replace(UPSTREAM, raw=text),  # the answer as given: a replay backend can answer with it
        )
