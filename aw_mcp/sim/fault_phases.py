"""The phases in which one call's fired perturbations are applied, each fault by its kind's entry (`perturb/fault_kinds.py`).

`before` the world model: delay (the delays add up) → the first abort in spec order (hang / protocol_error / error:
the world model is not asked) → the first replay (stale) → instruct (wrong_content / counterfactual notes for this
call's prompt). Where a fault also wants the world model's unperturbed observation (`ground_truth: true`), `before`
says so; the simulator asks for it and hands it to `settle_truth`. `after` it: shape (inject / truncate / empty /
oversized / malformed) in spec order; then `change_catalog`, which takes effect after the call whatever its outcome.
Every fault that fired is written to the call's fault entries (`Call.faults`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from aw_mcp.prompt.render import render_result
from aw_mcp.sim import fault_apply, fault_kinds
from aw_mcp.sim.call import Call
from aw_mcp.sim.fault_kinds import Aborted, Delay, Instructed, Phase, Replayed
from aw_mcp.sim.fault_planner import Firing
from aw_mcp.spec.faults import Perturbation
from aw_mcp.trajectory.records import CallRecord, FaultEntry


class Observed(Protocol):
    """What the world model answered (the simulator's outcome of a generation)."""

    text: str
    structured: Any
    is_error: bool


@dataclass
class Before:
    """The before-phase's result: an answer that replaces the world model's (`answer`, with `protocol_error` when
    the call must fail as a JSON-RPC error), or the notes this call's prompt gets. `wants_truth`: ask the world
    model for the unperturbed observation first and hand it to `settle_truth`."""

    answer: fault_apply.Answer | None = None
    protocol_error: tuple[int, str] | None = None
    notes: list[str] = field(default_factory=list)
    wants_truth: bool = False
    replayed: tuple[FaultEntry, Replayed] | None = None
    instructed: list[tuple[Firing, Instructed]] = field(default_factory=list)
    truth: str | None = None  # the unperturbed observation the world keeps while the agent sees another


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


def _log(call: Call, firing: Firing, **details: Any) -> FaultEntry:
    entry = fault_entry(firing, **details)
    call.faults.append(entry)
    return entry


def fired(call: Call, phase: Phase) -> list[Firing]:
    """The call's firings whose kind acts in `phase`, in spec order."""
    return [f for f in call.firings if fault_kinds.of(f.perturbation.fault).phase == phase]


def _apply(call: Call, firing: Firing, *more: Any) -> Any:
    """The fault's effect on this call, by its kind's `apply` (what it returns depends on the phase)."""
    fault = firing.perturbation.fault
    return fault_kinds.of(fault).apply(call, fault, firing, *more)


# ---------------------------------------------------------------------------------------------------------------
# before the world model
# ---------------------------------------------------------------------------------------------------------------


async def before(call: Call) -> Before:
    """Delays, then an abort or a replayed answer that replaces the world model's, else the instruct faults' notes
    for the prompt."""
    delays: list[tuple[Firing, Delay]] = [(f, _apply(call, f)) for f in fired(call, "delay")]
    for firing, delay in delays:
        _log(call, firing, latency_ms=round(delay.ms, 3))
    if delays:
        every = min(delay.progress_every_ms for _, delay in delays)
        await fault_apply.wait_with_progress(sum(delay.ms for _, delay in delays), every, call.report)
    aborts = fired(call, "abort")
    if aborts:
        for other in aborts[1:]:  # fired too, but one answer per call: the first in spec order wins
            _log(call, other, applied=False, reason=f"{aborts[0].name} already answered this call")
        return await _abort(call, aborts[0])
    replays = fired(call, "replay")
    if replays:
        replayed = _replay(call, replays[0])
        if replayed is not None:
            return replayed
    return _instruct(call, fired(call, "instruct"))


async def _abort(call: Call, firing: Firing) -> Before:
    """An answer that never reaches the world model; the call leaves no trace in the world's history."""
    call.in_history = False
    aborted: Aborted = _apply(call, firing)
    _log(call, firing, **aborted.details)
    if aborted.wait_s:
        await anyio.sleep(aborted.wait_s)
    return Before(answer=aborted.answer, protocol_error=aborted.protocol_error)


def _replay(call: Call, firing: Firing) -> Before | None:
    replayed: Replayed | str = _apply(call, firing)
    if isinstance(replayed, str):
        _log(call, firing, applied=False, reason=replayed)
        return None
    entry = _log(call, firing, **replayed.details)
    text = render_result(replayed.structured) if replayed.structured is not None else replayed.observation
    answer = fault_apply.Answer(text, structured=replayed.structured)
    if firing.perturbation.fault.wants_truth:
        return Before(answer=answer, wants_truth=True, replayed=(entry, replayed))
    call.in_history = False  # no world-model answer belongs in the history
    _show(call, replayed)
    return Before(answer=answer)


def _show(call: Call, replayed: Replayed) -> None:
    call.observation, call.structured = replayed.observation, replayed.structured


def _instruct(call: Call, firings: Sequence[Firing]) -> Before:
    plan = Before(
        instructed=[(f, _apply(call, f)) for f in firings],
        wants_truth=any(f.perturbation.fault.wants_truth for f in firings),
    )
    plan.notes = [instructed.note for _, instructed in plan.instructed]
    if not plan.wants_truth:
        _log_instructed(call, plan, None)
    return plan


def _log_instructed(call: Call, plan: Before, truth: Observed | None) -> None:
    for firing, instructed in plan.instructed:
        details = instructed.details if truth is None else {**instructed.details, "ground_truth": truth.text}
        _log(call, firing, **details)
    if truth is not None and not truth.is_error and all(i.truth_stands for _, i in plan.instructed):
        plan.truth = truth.text


def settle_truth(call: Call, plan: Before, truth: Observed) -> None:
    """The world model's unperturbed observation, asked for because `plan.wants_truth`: recorded with the faults
    that wanted it; the world keeps it where the agent sees something else."""
    if plan.replayed is not None:
        entry, replayed = plan.replayed
        entry.ground_truth = truth.text
        if truth.is_error:
            call.in_history = False
        else:
            call.truth = truth.text
        _show(call, replayed)
    else:
        _log_instructed(call, plan, truth)


# ---------------------------------------------------------------------------------------------------------------
# after it
# ---------------------------------------------------------------------------------------------------------------


def after(call: Call, plan: Before, observed: Observed) -> fault_apply.Answer | None:
    """Shape faults on the world model's answer, in spec order; each changes what the agent sees, never the world.
    None when the answer stands as it is."""
    if plan.truth is not None:
        call.truth = plan.truth
    shape = fired(call, "shape")
    if not shape:
        return None
    if observed.is_error:
        for firing in shape:
            _log(call, firing, applied=False, reason="the world model answered with an error")
        return None
    original = observed.text
    answer = fault_apply.Answer(observed.text, observed.structured)
    for firing in shape:
        kind = fault_kinds.of(firing.perturbation.fault)
        result: fault_apply.Answer | str = _apply(call, firing, answer)
        details = kind.details(call, firing.perturbation.fault) if kind.details is not None else {}
        if isinstance(result, str):
            _log(call, firing, applied=False, reason=result, **details)
            continue
        _log(call, firing, ground_truth=original, **details)
        answer = result
    if answer.text == original and answer.structured == observed.structured:
        return None
    if call.truth is None:
        call.truth = original
    call.observation, call.structured = answer.text, answer.structured
    return answer


def change_catalog(call: Call) -> None:
    """Catalog changes take effect after the call, whatever its outcome (each once per world)."""
    for firing in fired(call, "catalog"):
        if firing.name not in call.catalog.applied:
            fault = firing.perturbation.fault
            _log(call, firing, **fault_kinds.of(fault).apply(call.catalog, fault, firing.name))


def changed_catalog(entries: Iterable[FaultEntry]) -> bool:
    """Whether these fault entries changed the tool list (the server then notifies its clients)."""
    return any(
        e.applied and e.kind in fault_kinds.KINDS and fault_kinds.KINDS[e.kind].phase == "catalog"
        for e in entries
    )


def restore_catalog(
    catalog: fault_apply.Catalog, perturbations: Sequence[Perturbation], records: Iterable[CallRecord]
) -> None:
    """A resumed world keeps the catalog changes its recorded calls made, in the order they were made."""
    by_name = {p.name: p for p in perturbations}
    for record in sorted(records, key=lambda r: r.time):
        for entry in record.faults:
            p = by_name.get(entry.name)
            if p is None or not entry.applied or p.name in catalog.applied:
                continue
            kind = fault_kinds.of(p.fault)
            if kind.phase == "catalog":
                kind.apply(catalog, p.fault, p.name)
