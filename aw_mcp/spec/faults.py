"""Perturbation specs: what a world's `perturbations:` entries say (match, fault kind, schedule), as pydantic models.

Each fault kind's spec is a `FaultSpec` subclass (the built-in ones here, in `FAULT_SPECS`, which a `fault:` is
validated against); its phase, how it is applied and how an agent's reaction to it is graded are its entry in
`perturb/kinds.py`, whose `register` also adds a kind defined elsewhere. Which perturbations fire on a call is
decided in `perturb/planner.py`.
"""

from __future__ import annotations

import fnmatch
import math
import typing
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from aw_mcp.core.strict_model import StrictSpecModel

# JSON-RPC codes the MCP specification reserves for its own errors; a fault may only send them when asked to.
MCP_RESERVED_CODES = range(-32099, -32020 + 1)


Probability = Annotated[float, Field(ge=0.0, le=1.0)]

# ---------------------------------------------------------------------------------------------------------------
# match
# ---------------------------------------------------------------------------------------------------------------


class Match(StrictSpecModel):
    """Which calls a perturbation considers: a glob on the tool name and an optional subset of the arguments.

    An argument value that is a string is a glob too (`region: "eu-*"`); other values must be equal.
    """

    tool: str = "*"
    arguments: dict[str, Any] = Field(default_factory=dict)

    def matches(self, tool: str, arguments: dict[str, Any]) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        for key, want in self.arguments.items():
            if key not in arguments:
                return False
            got = arguments[key]
            if isinstance(want, str) and isinstance(got, str):
                if not fnmatch.fnmatchcase(got, want):
                    return False
            elif got != want:
                return False
        return True


# ---------------------------------------------------------------------------------------------------------------
# fault kinds (what happens when a perturbation fires); each kind's entry in aw_mcp/sim/fault_kinds.py applies it
# ---------------------------------------------------------------------------------------------------------------


# A fault's waits are bounded, so a world that validates also serves: `fixed_ms: .inf` never returned, `sigma: 10`
# slept 6.4e9 ms and `sigma: 1e28` overflowed. A call that must never answer is a `hang` fault without `seconds`.
MAX_DELAY_S = 3600.0
MAX_DELAY_MS = MAX_DELAY_S * 1000
# A lognormal's spread: its 99.9th percentile is then ~e^12 x the median (and no delay passes MAX_DELAY_MS).
MAX_SIGMA = 4.0


class FaultSpec(StrictSpecModel):
    """The base of a fault kind's spec: a subclass declares `kind: Literal["<name>"]` and its parameters. Its entry
    in `perturb/kinds.py` gives the kind its phase, its effect and its grading, and makes it readable in world
    files (`FAULT_SPECS`). No number of a fault is NaN or infinite."""

    model_config = ConfigDict(**StrictSpecModel.model_config, allow_inf_nan=False)

    kind: str
    # A degrade schedule's ramp scales this kind's effect (latency: the delay) instead of being its probability.
    ramp_scales: ClassVar[bool] = False

    @property
    def wants_truth(self) -> bool:
        """Whether the world model is also asked for the unperturbed observation (`ground_truth: true`)."""
        return bool(getattr(self, "ground_truth", False))


class LatencyFault(FaultSpec):
    """Wait before answering. Exactly one distribution: fixed, uniform, normal, or lognormal; plus jitter."""

    kind: Literal["latency"]
    ramp_scales: ClassVar[bool] = True
    fixed_ms: float | None = Field(default=None, ge=0, le=MAX_DELAY_MS)
    min_ms: float | None = Field(default=None, ge=0, le=MAX_DELAY_MS)
    max_ms: float | None = Field(default=None, ge=0, le=MAX_DELAY_MS)
    mean_ms: float | None = Field(default=None, ge=0, le=MAX_DELAY_MS)
    stddev_ms: float | None = Field(default=None, ge=0, le=MAX_DELAY_MS)
    median_ms: float | None = Field(default=None, gt=0, le=MAX_DELAY_MS)
    sigma: float | None = Field(default=None, ge=0, le=MAX_SIGMA)
    jitter_ms: float = Field(default=0.0, ge=0, le=MAX_DELAY_MS)
    progress_every_ms: float = Field(default=1000.0, gt=0, le=MAX_DELAY_MS)

    @model_validator(mode="after")
    def _one_distribution(self) -> LatencyFault:
        chosen = [
            name
            for name, fields in (
                ("fixed_ms", (self.fixed_ms,)),
                ("min_ms/max_ms", (self.min_ms, self.max_ms)),
                ("mean_ms/stddev_ms", (self.mean_ms, self.stddev_ms)),
                ("median_ms/sigma", (self.median_ms, self.sigma)),
            )
            if any(f is not None for f in fields)
        ]
        if len(chosen) != 1:
            raise ValueError(
                "give exactly one distribution: fixed_ms, min_ms+max_ms, mean_ms+stddev_ms or median_ms+sigma"
                + (f" (found {', '.join(chosen)})" if chosen else "")
            )
        pairs = {
            "min_ms/max_ms": (self.min_ms, self.max_ms),
            "mean_ms/stddev_ms": (self.mean_ms, self.stddev_ms),
            "median_ms/sigma": (self.median_ms, self.sigma),
        }
        if chosen[0] in pairs and None in pairs[chosen[0]]:
            raise ValueError(f"{chosen[0]} go together: give both")
        if self.min_ms is not None and self.max_ms is not None and self.min_ms > self.max_ms:
            raise ValueError("min_ms must not exceed max_ms")
        return self

    def sample_ms(self, u1: float, u2: float, u3: float) -> float:
        """A delay from three independent uniform draws in [0, 1), at most MAX_DELAY_MS (a normal's or lognormal's
        far tail is cut there)."""
        if self.fixed_ms is not None:
            base = self.fixed_ms
        elif self.min_ms is not None and self.max_ms is not None:
            base = self.min_ms + (self.max_ms - self.min_ms) * u1
        else:
            # Box-Muller; 1 - u1 is in (0, 1] so the log is finite.
            z = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)
            if self.mean_ms is not None and self.stddev_ms is not None:
                base = self.mean_ms + self.stddev_ms * z
            else:
                assert self.median_ms is not None and self.sigma is not None
                base = self.median_ms * math.exp(min(self.sigma * z, math.log(MAX_DELAY_MS / self.median_ms)))
        return min(MAX_DELAY_MS, max(0.0, base + self.jitter_ms * (2.0 * u3 - 1.0)))


class ErrorFault(FaultSpec):
    """An isError result in a realistic shape. Exactly one of: status, timeout_s, quota, declared."""

    kind: Literal["error"]
    status: int | None = Field(default=None, ge=400, le=599)
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_DELAY_S)
    quota: bool = False
    declared: str | None = None
    message: str | None = None  # a template: {argument} placeholders take the call's arguments
    retry_after_s: float | None = Field(default=None, ge=0, le=86_400)
    format: Literal["text", "json"] = "text"

    @model_validator(mode="after")
    def _one_family(self) -> ErrorFault:
        given = [
            n
            for n, v in (
                ("status", self.status),
                ("timeout_s", self.timeout_s),
                ("quota", self.quota or None),
                ("declared", self.declared),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of status, timeout_s, quota: true, or declared (a tool error's name)"
                + (f" (found {', '.join(given)})" if given else "")
            )
        if self.retry_after_s is not None and self.status not in (429, 503) and not self.quota:
            raise ValueError("retry_after_s belongs to status 429 or 503, or quota: true")
        return self


class HangFault(FaultSpec):
    """Never answer until the client cancels; with `seconds`, give up after that long with a timeout error."""

    kind: Literal["hang"]
    seconds: float | None = Field(default=None, gt=0, le=MAX_DELAY_S)


class ProtocolErrorFault(FaultSpec):
    """A JSON-RPC error instead of a result."""

    kind: Literal["protocol_error"]
    code: int = -32603
    message: str = "Internal error"
    allow_reserved: bool = False

    @model_validator(mode="after")
    def _not_reserved(self) -> ProtocolErrorFault:
        if self.code in MCP_RESERVED_CODES and not self.allow_reserved:
            raise ValueError(
                f"code {self.code} is in the range -32099..-32020 that MCP reserves for its own errors; "
                "set allow_reserved: true to send it anyway"
            )
        return self


class TruncateFault(FaultSpec):
    """Cut the answer: text keeps its first `keep` fraction; structured results keep that fraction of each list."""

    kind: Literal["truncate"]
    keep: float = Field(default=0.5, gt=0.0, lt=1.0)


class EmptyFault(FaultSpec):
    """An empty answer: empty text, or every list in a structured result emptied (when the schema allows it)."""

    kind: Literal["empty"]


class OversizedFault(FaultSpec):
    """A huge answer of at least `size_chars` characters (lists repeated for structured results)."""

    kind: Literal["oversized"]
    size_chars: int = Field(default=200_000, ge=1_000, le=50_000_000)


class MalformedFault(FaultSpec):
    """Invalid JSON (the answer cut before it closes). Opt-in only: no preset uses it."""

    kind: Literal["malformed"]


class StaleFault(FaultSpec):
    """Answer with an earlier observation of the same tool and arguments, even after a write."""

    kind: Literal["stale"]
    pick: Literal["first", "previous"] = "first"
    ground_truth: bool = False  # also ask the world model for the current answer, recorded with the fault


class WrongContentFault(FaultSpec):
    """This call's observation is plausible but wrong; the world's true state does not change."""

    kind: Literal["wrong_content"]
    instruction: str = Field(min_length=1)
    ground_truth: bool = False  # also ask the world model for the unperturbed observation


class CounterfactualFault(FaultSpec):
    """From this call on, the world holds something that is not so; the ledger keeps later calls consistent."""

    kind: Literal["counterfactual"]
    instruction: str = Field(min_length=1)
    ground_truth: bool = False


class ExpectCall(StrictSpecModel):
    """The call an injection tries to provoke. A later call in the same session that matches it means the agent
    followed the injection (the scorecard's `followed`): the tool name matches one of the globs, every listed
    argument matches (a string value is a glob) and, when `mentions` is given, some argument value contains one
    of those strings (case-insensitive; for injected account numbers or addresses, whatever the argument's name)."""

    tool: str | list[str] = "*"
    arguments: dict[str, Any] = Field(default_factory=dict)
    mentions: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _says_something(self) -> ExpectCall:
        tools = [self.tool] if isinstance(self.tool, str) else self.tool
        if not tools:
            raise ValueError("tool: give a glob or a list of globs")
        if tools == ["*"] and not self.arguments and not self.mentions:
            raise ValueError("expect_call matches every call: name a tool glob, arguments or mentions")
        return self

    def matches(self, tool: str, arguments: dict[str, Any]) -> bool:
        tools = [self.tool] if isinstance(self.tool, str) else self.tool
        if not any(Match(tool=glob, arguments=self.arguments).matches(tool, arguments) for glob in tools):
            return False
        if not self.mentions:
            return True
        values = [v.lower() for v in _scalars(arguments)]
        return any(m.lower() in v for m in self.mentions for v in values)


def _scalars(value: Any) -> list[str]:
    """Every string and number inside a JSON value, as text (keys excluded)."""
    if isinstance(value, dict):
        return [s for item in value.values() for s in _scalars(item)]
    if isinstance(value, list):
        return [s for item in value for s in _scalars(item)]
    return [] if value is None or isinstance(value, bool) else [str(value)]


class InjectFault(FaultSpec):
    """Text slotted into the observation (prompt-injection tests), from a named slot with a default text."""

    kind: Literal["inject"]
    slot: str = "ignore_previous"
    text: str | None = None  # overrides the slot's text for this perturbation
    position: Literal["end", "start"] = "end"
    field: str | None = None  # structured results: dotted path of the string field to carry it
    expect_call: ExpectCall | None = None  # the action it tries to provoke (default: the slot's, if any)


class CatalogFault(FaultSpec):
    """Change the tool catalog for the whole world when it fires (once), with a tools/list_changed notification."""

    kind: Literal["catalog"]
    add: list[dict[str, Any]] = Field(default_factory=list)  # full tool definitions, checked like `tools:`
    remove: list[str] = Field(default_factory=list)
    redescribe: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _does_something(self) -> CatalogFault:
        if not (self.add or self.remove or self.redescribe):
            raise ValueError("a catalog fault needs at least one of add, remove, redescribe")
        return self


def kind_name(spec: type[FaultSpec]) -> str:
    """The `kind:` a spec model declares."""
    names = typing.get_args(spec.model_fields["kind"].annotation)
    if len(names) != 1 or not isinstance(names[0], str):
        raise TypeError(f'{spec.__name__}: declare `kind: Literal["<name>"]`')
    return names[0]


FAULT_SPECS: dict[str, type[FaultSpec]] = {kind_name(spec): spec for spec in FaultSpec.__subclasses__()}
"""The spec model of every kind a world file's `fault:` may name: the built-in ones, defined above (their entries
are in `perturb/kinds.py`); `kinds.register` adds a kind defined elsewhere."""


def _fault_of_its_kind(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> FaultSpec:
    """A `fault:` validated by the spec model its `kind` names (as a discriminated union over `FAULT_SPECS` would,
    with its error messages, but over the kinds defined when the world is read)."""
    if isinstance(value, FaultSpec) and isinstance(value, FAULT_SPECS.get(value.kind, ())):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError(
            "model_attributes_type", "Input should be a valid dictionary or object to extract fields from"
        )
    if "kind" not in value:
        raise PydanticCustomError(
            "union_tag_not_found",
            "Unable to extract tag using discriminator {discriminator}",
            {"discriminator": "'kind'"},
        )
    tag = value["kind"]
    model = FAULT_SPECS.get(tag) if isinstance(tag, str) else None
    if model is None:
        raise PydanticCustomError(
            "union_tag_invalid",
            "Input tag '{tag}' found using {discriminator} does not match any of the expected tags: {expected_tags}",
            {
                "tag": str(tag),
                "discriminator": "'kind'",
                "expected_tags": ", ".join(repr(name) for name in FAULT_SPECS),
            },
        )
    return model.model_validate(value, context=info.context)


Fault = Annotated[SerializeAsAny[FaultSpec], WrapValidator(_fault_of_its_kind)]
"""A perturbation's fault: the `FaultSpec` subclass that its `kind` names."""

# ---------------------------------------------------------------------------------------------------------------
# schedules (when a matched call fires); `n` is the perturbation's own 1-based matched-call count
# ---------------------------------------------------------------------------------------------------------------


class Always(StrictSpecModel):
    mode: Literal["always"]


class RandomSchedule(StrictSpecModel):
    mode: Literal["random"]
    probability: Probability


class Every(StrictSpecModel):
    """The last `length` calls of every block of `every` matched calls (every: 5 → calls 5, 10, 15 ...)."""

    mode: Literal["every"]
    every: int = Field(ge=1)
    length: int = Field(default=1, ge=1)
    probability: Probability = 1.0

    @model_validator(mode="after")
    def _length_fits(self) -> Every:
        if self.length > self.every:
            raise ValueError("length must not exceed every")
        return self


class First(StrictSpecModel):
    """The first `calls` matched calls, then the tool recovers."""

    mode: Literal["first"]
    calls: int = Field(ge=1)
    probability: Probability = 1.0


class After(StrictSpecModel):
    """Every matched call after the first `calls` ones."""

    mode: Literal["after"]
    calls: int = Field(ge=0)
    probability: Probability = 1.0


class Window(StrictSpecModel):
    """Matched calls `start` to `end` inclusive (no `end`: for ever)."""

    mode: Literal["window"]
    start: int = Field(ge=1)
    end: int | None = Field(default=None, ge=1)
    probability: Probability = 1.0

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end is not None and self.end < self.start:
            raise ValueError("end must not be before start")
        return self


class CircuitBreaker(StrictSpecModel):
    """Closed: the upstream fails with `probability`. After `failures` consecutive errors on matched calls (from
    any cause) it opens: every matched call fails for `cooldown` calls; then one half-open trial call decides."""

    mode: Literal["circuit_breaker"]
    failures: int = Field(default=3, ge=1)
    cooldown: int = Field(default=5, ge=1)
    probability: Probability = 0.0


class Degrade(StrictSpecModel):
    """A ramp r(n) = min(max, start + step·(n-1)): the firing probability for most kinds; for latency faults the
    delay multiplier (always fires while r > 0)."""

    mode: Literal["degrade"]
    start: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    step: float = Field(gt=0, allow_inf_nan=False)
    max: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    def ramp(self, n: int) -> float:
        value = self.start + self.step * (n - 1)
        return value if self.max is None else min(self.max, value)


Schedule = Annotated[
    Always | RandomSchedule | Every | First | After | Window | CircuitBreaker | Degrade,
    Field(discriminator="mode"),
]


class Perturbation(StrictSpecModel):
    name: str = Field(min_length=1)
    match: Match = Field(default_factory=Match)
    fault: Fault
    schedule: Schedule = Field(default_factory=lambda: Always(mode="always"))

    @model_validator(mode="after")
    def _ramp_is_a_probability(self) -> Perturbation:
        s = self.schedule
        if isinstance(s, Degrade) and not self.fault.ramp_scales:
            if s.start > 1 or (s.max is not None and s.max > 1):
                raise ValueError("for this fault kind the degrade ramp is a probability: start and max ≤ 1")
        return self


def check_names_unique(perturbations: Sequence[Perturbation]) -> list[tuple[int, str]]:
    seen: set[str] = set()
    problems = []
    for i, p in enumerate(perturbations):
        if p.name in seen:
            problems.append((i, f"duplicate perturbation name {p.name!r}: names key the random draws"))
        seen.add(p.name)
    return problems
