"""The phases in which one call's fired perturbations are applied, each fault by its kind's entry (`fault_kinds.py`).

`before` the world model: delay (the delays add up) → the first abort in spec order (hang / protocol_error / error:
the world model is not asked) → the first replay (stale) → instruct (wrong_content / counterfactual notes for this
call's prompt). Where a fault also wants the world model's unperturbed observation (`ground_truth: true`), `before`
says so; the simulator asks for it and hands it to `settle_truth`. `after` it: shape (inject / truncate / empty /
oversized / malformed) in spec order; then `change_catalog`, which takes effect after the call whatever its outcome.
Every phase returns what it decided (a `Before` plan, an `Answer`); every fault that fired gets its trajectory entry
in the call's fault log (`Call.log`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio

from aw_mcp.prompt.render import render_result
from aw_mcp.sim import fault_apply, fault_kinds
from aw_mcp.sim.answer import Answer, Skipped
from aw_mcp.sim.call import Call
from aw_mcp.sim.fault_kinds import (
    Aborted,
    AbortKind,
    CatalogKind,
    DelayKind,
    Instructed,
    InstructKind,
    Replayed,
    ReplayKind,
    ShapeKind,
)
from aw_mcp.sim.fault_planner import Firing
from aw_mcp.spec.faults import Perturbation
from aw_mcp.trajectory.records import CallRecord, FaultEntry


@dataclass(frozen=True)
class Before:
    """The before-phase's result: an answer that replaces the world model's (an abort, a replay), or the notes this
    call's prompt gets. `wants_truth`: ask the world model for the unperturbed observation first and hand it to
    `settle_truth`, which gives the plan to go on with."""

    answer: Answer | None = None
    notes: tuple[str, ...] = ()
    wants_truth: bool = False
    replayed: tuple[FaultEntry, Replayed] | None = None  # a replay waiting for the truth
    instructed: tuple[tuple[Firing, Instructed], ...] = ()
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
    return call.log(fault_entry(firing, **details))


def _skipped(call: Call, firing: Firing, reason: str, **details: Any) -> None:
    _log(call, firing, applied=False, reason=reason, **details)


K = TypeVar("K", bound=fault_kinds.FaultKind)


def fired(call: Call, phase: type[K]) -> list[tuple[Firing, K]]:
    """The call's firings whose kind acts in `phase`, in spec order, each with its kind's entry."""
    kinds = [(f, fault_kinds.of(f.perturbation.fault)) for f in call.firings]
    return [(f, kind) for f, kind in kinds if isinstance(kind, phase)]


# ---------------------------------------------------------------------------------------------------------------
# before the world model
# ---------------------------------------------------------------------------------------------------------------


async def before(call: Call) -> Before:
    """Delays, then an abort or a replayed answer that replaces the world model's, else the instruct faults' notes
    for the prompt."""
    delays = [(f, kind.apply(call, f.perturbation.fault, f)) for f, kind in fired(call, DelayKind)]
    for firing, delay in delays:
        _log(call, firing, latency_ms=round(delay.ms, 3))
    if delays:
        every = min(delay.progress_every_ms for _, delay in delays)
        await fault_apply.wait_with_progress(sum(delay.ms for _, delay in delays), every, call.report)
    aborts = fired(call, AbortKind)
    if aborts:
        (first, kind), rest = aborts[0], aborts[1:]
        for other, _ in rest:  # fired too, but one answer per call: the first in spec order wins
            _skipped(call, other, f"{first.name} already answered this call")
        return await _abort(call, first, kind.apply(call, first.perturbation.fault, first))
    replays = fired(call, ReplayKind)
    if replays:
        firing, kind = replays[0]
        replayed = kind.apply(call, firing.perturbation.fault, firing)
        if isinstance(replayed, Skipped):
            _skipped(call, firing, replayed.reason)
        else:
            return _replay(call, firing, replayed)
    return _instruct(call, fired(call, InstructKind))


async def _abort(call: Call, firing: Firing, aborted: Aborted) -> Before:
    """An answer that never reaches the world model; the call leaves no trace in the world's history."""
    _log(call, firing, **aborted.details)
    if aborted.wait_s:
        await anyio.sleep(aborted.wait_s)
    answer = replace(aborted.answer, in_history=False, protocol_error=aborted.protocol_error)
    return Before(answer=answer)


def _replay(call: Call, firing: Firing, replayed: Replayed) -> Before:
    entry = _log(call, firing, **replayed.details)
    text = render_result(replayed.structured) if replayed.structured is not None else replayed.observation
    answer = Answer(text, structured=replayed.structured, observation=replayed.observation)
    if firing.perturbation.fault.wants_truth:
        return Before(answer=answer, wants_truth=True, replayed=(entry, replayed))
    return Before(answer=replace(answer, in_history=False))  # no world-model answer belongs in the history


def _instruct(call: Call, firings: Sequence[tuple[Firing, InstructKind]]) -> Before:
    instructed = tuple((f, kind.apply(call, f.perturbation.fault, f)) for f, kind in firings)
    plan = Before(
        notes=tuple(i.note for _, i in instructed),
        instructed=instructed,
        wants_truth=any(f.perturbation.fault.wants_truth for f, _ in firings),
    )
    if not plan.wants_truth:
        for firing, i in instructed:
            _log(call, firing, **i.details)
    return plan


def settle_truth(call: Call, plan: Before, truth: Answer) -> Before:
    """The world model's unperturbed observation, asked for because `plan.wants_truth`: recorded with the faults
    that wanted it; the world keeps it where the agent sees something else. The plan to go on with."""
    if plan.replayed is not None:
        entry, _ = plan.replayed
        entry.ground_truth = truth.text  # its entry is logged already: a cancel during the truth keeps it
        assert plan.answer is not None
        answer = replace(
            plan.answer,
            truth=None if truth.is_error else truth.text,
            in_history=not truth.is_error,
            error=truth.error,
            generated=truth.generated,
        )
        return replace(plan, answer=answer)
    for firing, i in plan.instructed:
        _log(call, firing, **{**i.details, "ground_truth": truth.text})
    stands = not truth.is_error and all(i.truth_stands for _, i in plan.instructed)
    return replace(plan, truth=truth.text if stands else None)


# ---------------------------------------------------------------------------------------------------------------
# after it
# ---------------------------------------------------------------------------------------------------------------


def after(call: Call, plan: Before, answer: Answer) -> Answer:
    """Shape faults on the world model's answer, in spec order; each changes what the agent sees, never the world.
    The answer as the agent gets it."""
    if plan.truth is not None:
        answer = replace(answer, truth=plan.truth)
    shape = fired(call, ShapeKind)
    if not shape:
        return answer
    if answer.is_error:
        for firing, _ in shape:
            _skipped(call, firing, "the world model answered with an error")
        return answer
    shown = answer
    for firing, kind in shape:
        fault = firing.perturbation.fault
        result = kind.apply(call, fault, firing, shown)
        details = kind.details(call, fault) if kind.details is not None else {}
        if isinstance(result, Skipped):
            _skipped(call, firing, result.reason, **details)
            continue
        _log(call, firing, ground_truth=answer.text, **details)
        shown = replace(shown, text=result.text, structured=result.structured, is_error=result.is_error)
    if shown.text == answer.text and shown.structured == answer.structured:
        return answer
    truth = answer.truth if answer.truth is not None else answer.text
    return replace(shown, observation=shown.text, truth=truth)


def change_catalog(call: Call) -> None:
    """Catalog changes take effect after the call, whatever its outcome (each once per world)."""
    for firing, kind in fired(call, CatalogKind):
        if firing.name not in call.catalog.applied:
            _log(call, firing, **kind.apply(call.catalog, firing.perturbation.fault, firing.name))


def changed_catalog(entries: Iterable[FaultEntry]) -> bool:
    """Whether these fault entries changed the tool list (the server then notifies its clients)."""
    return any(
        e.applied and e.kind in fault_kinds.KINDS and isinstance(fault_kinds.KINDS[e.kind], CatalogKind)
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
            if isinstance(kind, CatalogKind):
                kind.apply(catalog, p.fault, p.name)
