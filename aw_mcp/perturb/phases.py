"""The two phases in which one call's fired perturbations are applied; the simulator calls each once.

`before` the world model: latency (the delays add up) → the first of hang / protocol_error / error in spec order
(the world model is not asked) → stale → wrong_content / counterfactual instructions for this call's prompt.
`after` it: inject / truncate / empty / oversized / malformed in spec order; then `catalog` changes, which take
effect after the call whatever its outcome. Every fault that fired is written to the call's record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from aw_mcp.perturb import apply
from aw_mcp.perturb.injections import InjectionSlot
from aw_mcp.perturb.planner import Firing
from aw_mcp.perturb.spec import (
    CatalogFault,
    CounterfactualFault,
    EmptyFault,
    ErrorFault,
    HangFault,
    InjectFault,
    LatencyFault,
    MalformedFault,
    OversizedFault,
    ProtocolErrorFault,
    StaleFault,
    TruncateFault,
    WrongContentFault,
)
from aw_mcp.progress import Reporter
from aw_mcp.prompting import render_result
from aw_mcp.records import CallRecord, FaultEntry
from aw_mcp.world import ToolSpec

_SHAPE_FAULTS = (InjectFault, TruncateFault, EmptyFault, OversizedFault, MalformedFault)


class Observed(Protocol):
    """What the world model answered (the simulator's outcome of a generation)."""

    text: str
    structured: Any
    is_error: bool


Generate = Callable[[list[str]], Awaitable[Observed]]
"""Ask the world model for this call, with these notes added to the prompt."""


@dataclass
class Early:
    """The before-phase's result: an answer that replaces the world model's (`answer`, with `protocol_error` when
    the call must fail as a JSON-RPC error), or the notes this call's prompt gets."""

    answer: apply.Answer | None = None
    protocol_error: tuple[int, str] | None = None
    notes: list[str] = field(default_factory=list)


def fault_entry(firing: Firing, **details: Any) -> FaultEntry:
    """How a fired perturbation appears in the trajectory's `faults` list and in `world://faults`."""
    p = firing.perturbation
    entry: dict[str, Any] = {
        "name": p.name,
        "kind": p.fault.kind,
        "parameters": p.fault.model_dump(exclude={"kind"}, exclude_defaults=True),
        "schedule": p.schedule.model_dump(exclude_defaults=True) | {"mode": p.schedule.mode},
        "call": firing.n,
        "applied": True,
    }
    if firing.state is not None:
        entry["breaker"] = firing.state
    if firing.scale != 1.0:
        entry["scale"] = round(firing.scale, 6)
    entry.update(details)
    return FaultEntry.model_validate(entry)


class CallPerturbation:
    """The perturbations that fired on one call, applied to it in two phases."""

    def __init__(
        self,
        firings: list[Firing],
        *,
        seed: int,
        tool: ToolSpec,
        arguments: dict[str, Any],
        record: CallRecord,
        slots: dict[str, InjectionSlot],
        catalog: apply.Catalog,
    ):
        self.firings = firings
        self.seed = seed
        self.tool = tool
        self.arguments = arguments
        self.values = {**arguments, "tool": tool.name}
        self.record = record
        self.slots = slots
        self.catalog = catalog
        self._truth: str | None = None  # a wrong reading's truth: the world itself did not change

    def fired(self, *kinds: type) -> list[Firing]:
        return [f for f in self.firings if isinstance(f.perturbation.fault, kinds)]

    async def before(
        self, records: Sequence[CallRecord], report: Reporter | None, generate: Generate
    ) -> Early:
        """Latency, then an abort or a stale answer that replaces the world model's, else the content faults'
        instructions for the prompt (asking the world model for the ground truth first where a fault wants it)."""
        record = self.record
        delays = [
            (f, apply.latency_ms(self.seed, f, self.tool.name, self.arguments))
            for f in self.fired(LatencyFault)
        ]
        for firing, ms in delays:
            record.faults.append(fault_entry(firing, latency_ms=round(ms, 3)))
        if delays:
            every = min(f.perturbation.fault.progress_every_ms for f, _ in delays)  # type: ignore[union-attr]
            await apply.wait_with_progress(sum(ms for _, ms in delays), every, report)
        aborts = self.fired(HangFault, ProtocolErrorFault, ErrorFault)
        if aborts:
            for other in aborts[1:]:  # fired too, but one answer per call: the first in spec order wins
                reason = f"{aborts[0].name} already answered this call"
                record.faults.append(fault_entry(other, applied=False, reason=reason))
            return await self._abort(aborts[0])
        stale = self.fired(StaleFault)
        if stale:
            answer = await self._stale(stale[0], records, generate)
            if answer is not None:
                return Early(answer=answer)

        content = self.fired(WrongContentFault, CounterfactualFault)
        truth: Observed | None = None
        if any(f.perturbation.fault.ground_truth for f in content):  # type: ignore[union-attr]
            truth = await generate([])
        instructions = []
        for firing in content:
            fault = firing.perturbation.fault
            assert isinstance(fault, WrongContentFault | CounterfactualFault)
            instruction = apply.fill_template(fault.instruction, self.values)
            instructions.append(
                f"Deliberate fault for this step only: {instruction} Make the observation look genuine and do "
                "not mention this note."
                if isinstance(fault, WrongContentFault)
                else f"From this step on this is true in the world: {instruction} Write the observation "
                "accordingly, keep to it in later steps, and do not mention this note."
            )
            entry = fault_entry(firing, instruction=instruction)
            if truth is not None:
                entry.ground_truth = truth.text
            record.faults.append(entry)
        if (
            truth is not None
            and not truth.is_error
            and all(isinstance(f.perturbation.fault, WrongContentFault) for f in content)
        ):
            self._truth = truth.text
        return Early(notes=instructions)

    def after(self, observed: Observed) -> apply.Answer | None:
        """Faults on the world model's answer, in spec order; each changes what the agent sees, never the world.
        None when the answer stands as it is."""
        record = self.record
        if self._truth is not None:
            record.truth = self._truth
        shape = self.fired(*_SHAPE_FAULTS)
        if not shape:
            return None
        if observed.is_error:
            for firing in shape:
                record.faults.append(
                    fault_entry(firing, applied=False, reason="the world model answered with an error")
                )
            return None
        original = observed.text
        answer = apply.Answer(observed.text, observed.structured)
        for firing in shape:
            fault = firing.perturbation.fault
            if isinstance(fault, InjectFault):
                result: apply.Answer | str = apply.inject(fault, self.tool, answer, self.slots, self.values)
            elif isinstance(fault, TruncateFault):
                result = apply.truncate(fault, self.tool, answer)
            elif isinstance(fault, EmptyFault):
                result = apply.empty(fault, self.tool, answer)
            elif isinstance(fault, OversizedFault):
                result = apply.oversized(fault, self.tool, answer)
            else:
                assert isinstance(fault, MalformedFault)
                result = apply.malformed(fault, self.tool, answer)
            details: dict[str, Any] = {}
            if isinstance(fault, InjectFault):
                details["expect_call"] = self.expected_call(fault)
            if isinstance(result, str):
                record.faults.append(fault_entry(firing, applied=False, reason=result, **details))
                continue
            record.faults.append(fault_entry(firing, ground_truth=original, **details))
            answer = result
        if answer.text == original and answer.structured == observed.structured:
            return None
        if record.truth is None:
            record.truth = original
        record.observation, record.structured = answer.text, answer.structured
        return answer

    def expected_call(self, fault: InjectFault) -> dict[str, Any] | None:
        """The call this injection tries to provoke: the fault's own, else its slot's (None: not known)."""
        expect = fault.expect_call
        if expect is None and fault.text is None and fault.slot in self.slots:
            expect = self.slots[fault.slot].expect_call
        return expect.model_dump(exclude_defaults=True) if expect is not None else None

    def change_catalog(self) -> None:
        """Catalog changes take effect after the call, whatever its outcome."""
        for firing in self.firings:
            fault = firing.perturbation.fault
            if isinstance(fault, CatalogFault) and firing.name not in self.catalog.applied:
                self.record.faults.append(fault_entry(firing, **self.catalog.apply(firing.name, fault)))

    async def _abort(self, firing: Firing) -> Early:
        """An answer that never reaches the world model; the call leaves no trace in the world's history."""
        fault = firing.perturbation.fault
        record = self.record
        record.in_history = False
        if isinstance(fault, HangFault):
            record.faults.append(fault_entry(firing))
            if fault.seconds is None:
                await anyio.sleep_forever()
            await anyio.sleep(fault.seconds or 0)
            return Early(
                answer=apply.Answer(apply.timeout_text(self.tool.name, fault.seconds or 0), is_error=True)
            )
        if isinstance(fault, ProtocolErrorFault):
            record.faults.append(fault_entry(firing))
            text = f"JSON-RPC error {fault.code}: {fault.message}"
            return Early(answer=apply.Answer(text, is_error=True), protocol_error=(fault.code, fault.message))
        assert isinstance(fault, ErrorFault)
        body = apply.error_body(fault, self.tool, self.arguments)
        record.faults.append(fault_entry(firing, **body.details))
        return Early(answer=apply.Answer(body.text, is_error=True))

    async def _stale(
        self, firing: Firing, records: Sequence[CallRecord], generate: Generate
    ) -> apply.Answer | None:
        fault = firing.perturbation.fault
        assert isinstance(fault, StaleFault)
        record = self.record
        earlier = apply.earlier_observation(records, self.tool.name, self.arguments, fault.pick)
        if earlier is None:
            record.faults.append(
                fault_entry(firing, applied=False, reason="no earlier observation of this call to repeat")
            )
            return None
        entry = fault_entry(firing, stale_of=earlier.index + 1)
        record.faults.append(entry)
        if fault.ground_truth:
            truth = await generate([])
            entry.ground_truth = truth.text
            if truth.is_error:
                record.in_history = False
            else:
                record.truth = truth.text
        else:
            record.in_history = False
        record.observation, record.structured = earlier.observation, earlier.structured
        text = render_result(earlier.structured) if earlier.structured is not None else earlier.observation
        return apply.Answer(text, structured=earlier.structured)
