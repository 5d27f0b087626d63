"""The pure decision of which perturbations fire on a call.

A decision is a pure function of (world seed, perturbation name, call index, tool, arguments): every random draw
is a SHA-256 of those values mapped to [0, 1), so the same seed and the same calls give the same faults in any
process. The call index `n` is per perturbation: the 1-based count of calls, in this world session, that the
perturbation's `match` selected. The circuit breaker additionally reads the outcomes (error or not) of the earlier
calls it matched, which the session's history already holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aw_mcp.spec.faults import (
    After,
    Always,
    CircuitBreaker,
    Degrade,
    Every,
    First,
    Perturbation,
    RandomSchedule,
    Window,
)

# ---------------------------------------------------------------------------------------------------------------
# the decision
# ---------------------------------------------------------------------------------------------------------------


def uniform(seed: int, name: str, n: int, tool: str, arguments: dict[str, Any], salt: str = "fire") -> float:
    """A uniform draw in [0, 1) fixed by its inputs (identical in every process and on every platform)."""
    blob = json.dumps(
        [seed, name, n, tool, arguments, salt], sort_keys=True, separators=(",", ":"), default=str
    )
    digest = hashlib.sha256(blob.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def breaker_state(outcomes: Sequence[bool], failures: int, cooldown: int) -> str:
    """closed | open | half_open after these earlier matched outcomes (True = the call was an error)."""
    state, consecutive, remaining = "closed", 0, 0
    for failed in outcomes:
        if state == "open":
            remaining -= 1
            if remaining == 0:
                state = "half_open"
        elif state == "half_open":
            state, remaining = ("open", cooldown) if failed else ("closed", 0)
            consecutive = 0
        else:
            consecutive = consecutive + 1 if failed else 0
            if consecutive >= failures:
                state, remaining, consecutive = "open", cooldown, 0
    return state


@dataclass(frozen=True)
class Firing:
    """A perturbation that fires on this call, and why."""

    perturbation: Perturbation
    n: int  # the perturbation's 1-based matched-call count
    scale: float = 1.0  # degrade: latency multiplier
    state: str | None = None  # circuit_breaker: the state the call met

    @property
    def name(self) -> str:
        return self.perturbation.name


def decide(
    seed: int,
    perturbation: Perturbation,
    n: int,
    tool: str,
    arguments: dict[str, Any],
    outcomes: Sequence[bool] = (),
) -> Firing | None:
    """Does `perturbation` fire on its n-th matched call? `outcomes`: earlier matched calls' error flags."""
    s = perturbation.schedule

    def draw() -> float:
        return uniform(seed, perturbation.name, n, tool, arguments)

    if isinstance(s, Always):
        return Firing(perturbation, n)
    if isinstance(s, RandomSchedule):
        return Firing(perturbation, n) if draw() < s.probability else None
    if isinstance(s, CircuitBreaker):
        state = breaker_state(outcomes, s.failures, s.cooldown)
        fires = state == "open" or draw() < s.probability
        return Firing(perturbation, n, state=state) if fires else None
    if isinstance(s, Degrade):
        ramp = s.ramp(n)
        if perturbation.fault.ramp_scales:
            return Firing(perturbation, n, scale=ramp) if ramp > 0 else None
        return Firing(perturbation, n) if draw() < min(1.0, ramp) else None
    if isinstance(s, Every):
        in_phase = (n - 1) % s.every >= s.every - s.length
    elif isinstance(s, First):
        in_phase = n <= s.calls
    elif isinstance(s, After):
        in_phase = n > s.calls
    else:
        assert isinstance(s, Window)
        in_phase = n >= s.start and (s.end is None or n <= s.end)
    if not in_phase:
        return None
    return Firing(perturbation, n) if s.probability >= 1.0 or draw() < s.probability else None


class Planner:
    """Keeps each session's per-perturbation matched-call counts and decides which perturbations fire on a call.

    Counts are claimed when a call starts (calls may overlap) and are seeded from a resumed session's records, so
    a resumed world continues the same fault sequence.
    """

    def __init__(self, perturbations: Sequence[Perturbation], seed: int):
        self.perturbations = list(perturbations)
        self.seed = seed
        self._counts: dict[str, dict[str, int]] = {}

    def fork(self, session_id: str, child_id: str, into: Planner | None = None) -> None:
        """The child session continues the parent's fault sequence from the same position (`into`: the child's
        planner when it has its own, else this one)."""
        counts = self._counts.get(session_id)
        if counts is not None:
            (into or self)._counts[child_id] = dict(counts)

    def _counts_for(self, session_id: str, history: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, int]:
        counts = self._counts.get(session_id)
        if counts is None:
            counts = self._counts[session_id] = {
                p.name: sum(p.match.matches(t, a) for t, a in history) for p in self.perturbations
            }
        return counts

    def plan(
        self,
        session_id: str,
        history: Sequence[tuple[str, dict[str, Any], bool]],
        tool: str,
        arguments: dict[str, Any],
        only: Sequence[Perturbation] | None = None,
    ) -> list[Firing]:
        """The perturbations (in spec order) that fire on this call. `history`: (tool, arguments, was_error) of
        the session's completed calls, in call order; `only` restricts the decision to some perturbations."""
        counts = self._counts_for(session_id, [(t, a) for t, a, _ in history])
        fired = []
        for p in only if only is not None else self.perturbations:
            if not p.match.matches(tool, arguments):
                continue
            counts[p.name] += 1
            # Only a circuit breaker reads earlier outcomes: do not walk the session for the others.
            outcomes = (
                [failed for t, a, failed in history if p.match.matches(t, a)]
                if isinstance(p.schedule, CircuitBreaker)
                else []
            )
            firing = decide(self.seed, p, counts[p.name], tool, arguments, outcomes)
            if firing is not None:
                fired.append(firing)
        return fired
