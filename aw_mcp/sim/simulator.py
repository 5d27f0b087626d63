"""The call pipeline: validate arguments → perturb (before) → world model → parse/validate → perturb (after) → record.

Every failure inside a call becomes an `isError` outcome the agent can read; only an unknown tool is a protocol
error (the server maps UnknownToolError to JSON-RPC -32602), and a `protocol_error` fault asks for one on purpose.

One `Call` (aw_mcp/sim/call.py) carries the call through every step here and in `perturb/fault_phases.py`, which applies
the perturbations that fire on it, each by its kind's entry in `perturb/fault_kinds.py`: before the world model (delay,
abort, replay, instruct) and after it (shape; then catalog changes). Their order is listed there and in the README,
"Perturbations". The call's record is built from the `Call` once, when it commits.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import time
import weakref
from dataclasses import dataclass, replace
from typing import Any

import anyio
import anyio.lowlevel
import mcp.types as types

from aw_mcp.backends.contract import WorldModel
from aw_mcp.core.errors import UserError
from aw_mcp.core.model_io import (
    BackendError,
    CallRef,
    Generation,
    GenerationParams,
    answer_size,
    answer_size_problem,
)
from aw_mcp.prompt.budget import (
    DEFAULT_CONTEXT_TOKENS,
    compaction_note,
    estimate_tokens,
    is_context_overflow,
    prompt_budget,
)
from aw_mcp.prompt.catalog import CatalogForm
from aw_mcp.prompt.constraint import constraint_for
from aw_mcp.prompt.parse import parse_answer, parse_json_observation
from aw_mcp.prompt.render import catalog_form, render_result, render_system_prompt
from aw_mcp.prompt.transcript import Prompt
from aw_mcp.sim import fault_apply, fault_kinds, fault_phases
from aw_mcp.sim.call import Call
from aw_mcp.sim.fault_planner import Planner
from aw_mcp.sim.progress import Reporter, monotonic
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.sim.session import RecordingError, WorldSession
from aw_mcp.spec.injections import BUILTIN_INJECTIONS
from aw_mcp.spec.world import ModelSettings, ToolSpec, WorldSpec
from aw_mcp.trajectory.records import CallRecord

log = logging.getLogger(__name__)

# Tool-execution failures as a real API would phrase them; for `mcp` worlds such an observation is an isError result.
_ERROR_TEXT = re.compile(
    r"^\s*(?:error\b|[\w.]*(?:error|exception)\s*:|(?:http\s*)?[45]\d\d\s+[a-z]|\{\s*\"(?:error|errors)\"\s*:)",
    re.IGNORECASE,
)


# Answers larger than this are parsed and validated in a worker thread, so a big one never holds the event loop
# (other sessions' requests and pings); smaller ones stay inline, where a thread hop would cost more than the work.
INLINE_ANSWER_BYTES = 64 * 1024


class UnknownToolError(UserError, LookupError):
    def __init__(self, name: str, known: list[str]):
        super().__init__(f"Unknown tool: {name!r}. Tools in this world: {', '.join(known)}")
        self.name = name


@dataclass
class CallOutcome:
    text: str
    structured: Any = None
    is_error: bool = False
    record: CallRecord | None = None
    protocol_error: tuple[int, str] | None = (
        None  # (JSON-RPC code, message): answer with an error, not a result
    )
    catalog_changed: bool = False  # the tool list changed: the server notifies clients

    def result(self) -> types.CallToolResult:
        """The MCP result the agent gets (over MCP and through aw_mcp.Env alike): the observation, a line saying
        so when the answer is not the world model's (demo), structured content unless it is an error."""
        content = [types.TextContent(type="text", text=self.text)]
        notice = self.record.notice if self.record is not None else None
        if notice:
            content.append(types.TextContent(type="text", text=f"[{notice}]"))
        return types.CallToolResult(
            content=content,
            structured_content=self.structured if not self.is_error else None,
            is_error=self.is_error,
        )


def params_from_settings(settings: ModelSettings) -> GenerationParams:
    return GenerationParams(
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        max_tokens=settings.token_budget,
        thinking=settings.thinking,
        max_answer_bytes=settings.max_answer_bytes,
    )


def looks_like_error(observation: str) -> bool:
    return bool(_ERROR_TEXT.match(observation))


def call_seed(world_seed: int, index: int, attempt: int) -> int:
    """Per-call sampling seed: the same world seed and call sequence give the same samples."""
    return (world_seed * 1_000_003 + index * 7_919 + attempt) % (2**31 - 1)


class Simulator:
    def __init__(
        self,
        world: WorldSpec,
        backend: WorldModel,
        registry: SessionRegistry | None = None,
        params: GenerationParams | None = None,
        output_retries: int | None = None,
        template: str | None = None,
    ):
        self.world = world
        self.template = template  # the system prompt template (None: the bundled one for the world's domain)
        # Rendered once per session, at its first call (a compact catalog: again when the called tool changes,
        # prompt/catalog.py); forgotten with the session. Keyed by the tool a compact catalog shows whole.
        self._system_prompts: weakref.WeakKeyDictionary[WorldSession, tuple[str | None, str]] = (
            weakref.WeakKeyDictionary()
        )
        self.backend = backend
        self.registry = registry if registry is not None else SessionRegistry(world)
        self.params = params or params_from_settings(world.model)
        self.output_retries = world.model.output_retries if output_retries is None else output_retries
        self.perturbations = world.all_perturbations()
        for p in self.perturbations:
            fault_kinds.of(p.fault)  # every kind a world names has its entry
        self.planner = Planner(self.perturbations, world.seed)
        self.catalog = fault_apply.Catalog(world.tools)
        self.slots = {**BUILTIN_INJECTIONS, **world.injections}
        records = (r for s in self.registry.sessions() for r in s.records)
        fault_phases.restore_catalog(self.catalog, self.perturbations, records)

    @functools.cached_property
    def catalog_form(self) -> CatalogForm:
        """How the system prompt lists the tools at this context (prompt/catalog.py), decided once."""
        budget = prompt_budget(self.context_tokens, self.params.max_tokens)
        return catalog_form(self.world, self.template, budget)

    def system_prompt(self, session: WorldSession, tool: str | None = None) -> str:
        """The session's system prompt for a call of `tool` (only a compact catalog depends on the tool)."""
        shown = tool if self.catalog_form is CatalogForm.COMPACT else None
        cached = self._system_prompts.get(session)
        if cached is None or cached[0] != shown:
            prompt = render_system_prompt(self.world, session.now, self.template, self.catalog_form, shown)
            cached = self._system_prompts[session] = (shown, prompt)
        return cached[1]

    def fork(self, key: str | None, n: int) -> list[WorldSession]:
        """`n` sessions forked from session `key` at its current point, continuing its fault sequence. They share
        this world's tool catalog, as every session served by one server does (MCP: one tool list per server)."""
        parent = key or self.registry.default_key
        children = self.registry.fork(parent, n)
        for child in children:
            self.planner.fork(parent, child.id)
        return children

    def spin_off(self, session: WorldSession) -> Simulator:
        """A simulator of its own for a fork of `session` (aw_mcp.env): catalog and fault position copied, the
        backend and the trajectory file shared."""
        child = session.fork(self.registry.new_key())
        registry = SessionRegistry(self.world, self.registry.writer, idle_ttl_s=None)
        registry.adopt(child)
        registry.default_key = child.id
        twin = Simulator(self.world, self.backend, registry, self.params, self.output_retries, self.template)
        twin.catalog = self.catalog.copy()
        self.planner.fork(session.id, child.id, into=twin.planner)
        if session in self._system_prompts:
            twin._system_prompts[child] = self._system_prompts[session]
        return twin

    def tool(self, name: str) -> ToolSpec:
        tool = self.catalog.get(name)
        if tool is None:
            raise UnknownToolError(name, [t.name for t in self.catalog.tools])
        return tool

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        session_key: str | None = None,
        report: Reporter | None = None,
    ) -> CallOutcome:
        arguments = dict(arguments or {})
        session = self.registry.get(session_key)
        tool = self.catalog.get(name)
        if tool is None:
            raise await self._record_unknown(name, arguments, session)
        session.busy += 1
        try:
            return await self._commit(self._start(tool, arguments, session, report))
        finally:
            session.busy -= 1
            session.last_used = self.registry.clock()

    def _start(
        self, tool: ToolSpec, arguments: dict[str, Any], session: WorldSession, report: Reporter | None
    ) -> Call:
        """The context of the session's next call (its index claimed now, so overlapping calls stay ordered)."""
        return Call(
            world=self.world.name,
            tool=tool,
            arguments=tool.without_refused_nulls(arguments),  # null for an optional argument: absent
            session=session,
            index=session.claim_index(),
            report=monotonic(report),
            seed=self.world.seed,
            slots=self.slots,
            catalog=self.catalog,
            notice=getattr(self.backend, "notice", None),
        )

    async def _record_unknown(
        self, name: str, arguments: dict[str, Any], session: WorldSession
    ) -> UnknownToolError:
        """A call to a tool the world does not have (never had, or a catalog change removed) is recorded, so a
        report can tell that the agent kept using a removed tool; returns the error that refuses it."""
        error = UnknownToolError(name, [t.name for t in self.catalog.tools])
        record = CallRecord(
            world=self.world.name,
            session=session.id,
            index=session.claim_index(),
            tool=name,
            arguments=arguments,
            forked_from=session.forked_from,
            observation=str(error),
            is_error=True,
            error="unknown tool",
            in_history=False,
        )
        try:
            await self.registry.commit(session, record)
        except RecordingError as exc:
            log.warning("call to unknown tool %r not recorded: %s", name, exc)
        return error

    async def _commit(self, call: Call) -> CallOutcome:
        """One call, committed once: its record, built from the call, is written ahead and only then enters the
        session's history; a call the client gave up on is recorded as cancelled, whatever answer arrived after."""
        name = call.tool.name
        started = time.perf_counter()
        try:
            outcome = await self._run(call)
            await anyio.lowlevel.checkpoint_if_cancelled()  # the client gave up while the answer arrived
        except anyio.get_cancelled_exc_class():
            call.error = "cancelled by the client"
            call.in_history = False
            record = call.record(latency_ms=(time.perf_counter() - started) * 1000)
            with contextlib.suppress(RecordingError):
                await self.registry.commit(call.session, record)
            raise
        except Exception as exc:  # a bug must cost one call, never the server
            outcome = CallOutcome(f"Internal simulator error while calling {name}: {exc}", is_error=True)
            call.error = f"{type(exc).__name__}: {exc}"
        record = call.record(
            latency_ms=(time.perf_counter() - started) * 1000, is_error=outcome.is_error, shown=outcome.text
        )
        outcome.record = record
        outcome.catalog_changed = fault_phases.changed_catalog(record.faults)
        try:
            await self.registry.commit(call.session, record)
        except RecordingError as exc:  # the world did not take this call in: neither may the agent
            return CallOutcome(
                f"The call to {name} could not be recorded, so it did not happen: {exc}",
                is_error=True,
                record=record,
            )
        return outcome

    async def _run(self, call: Call) -> CallOutcome:
        problems = call.tool.argument_problems(call.arguments)
        if problems:
            call.error = "invalid arguments"
            text = f"Invalid arguments for tool {call.tool.name}: " + "; ".join(problems)
            return CallOutcome(text, is_error=True)
        pending = [p for p in self.perturbations if p.name not in self.catalog.applied]
        history = (
            [
                (r.tool, r.arguments, r.is_error or r.error is not None)
                for r in sorted(call.session.records, key=lambda r: r.index)
            ]
            if pending
            else []
        )
        call.firings = self.planner.plan(
            call.session.id, history, call.tool.name, call.arguments, only=pending
        )
        try:
            return await self._perturbed(call)
        finally:
            fault_phases.change_catalog(call)

    async def _perturbed(self, call: Call) -> CallOutcome:
        """perturb (before) → [the unperturbed answer, where a fault wants it] → prompt → world model → parse →
        perturb (after)."""
        plan = await fault_phases.before(call)
        if plan.wants_truth:
            fault_phases.settle_truth(call, plan, await self._generate(call, []))
        if plan.answer is not None:
            answer = plan.answer
            return CallOutcome(
                answer.text, answer.structured, answer.is_error, protocol_error=plan.protocol_error
            )
        outcome = await self._generate(call, plan.notes)
        changed = fault_phases.after(call, plan, outcome)
        if changed is None:
            return outcome
        return CallOutcome(changed.text, structured=changed.structured, is_error=changed.is_error)

    def _tool_or_original(self, name: str) -> ToolSpec | None:
        return self.catalog.get(name) or self.world.tool(name)

    async def _generate(self, call: Call, extra: list[str]) -> CallOutcome:
        """Ask the world model for this call, with `extra` notes added to the prompt."""
        tool, session = call.tool, call.session
        if call.notes is None:  # what earlier calls established, read once the before-phase's waits are over
            call.notes = session.ledger.notes(session.records, self._tool_or_original)
            if tool.name in self.catalog.added:  # the world model's system prompt predates this tool
                call.notes.append(
                    f"This tool was added to the API during the session; its definition: {tool.wire()}"
                )
        prompt = self._fit(call, call.notes + extra)
        if prompt is None:
            call.error = "prompt does not fit the context"
            return CallOutcome(
                f"This call to {tool.name} cannot be simulated: its prompt alone needs more than the world "
                f"model's context of {self.context_tokens:,} tokens (less {self.params.max_tokens:,} reserved for "
                "the answer). Send smaller arguments.",
                is_error=True,
            )
        call.messages_hash = prompt.hash
        outcome = await self._generate_observation(call, prompt.messages)
        if call.error is not None and is_context_overflow(call.error):
            # The server counted more tokens than the estimate: show it half the remaining turns next time.
            shown = len(session.history) - session.compacted
            session.compacted += max(1, (shown + 1) // 2) if shown else 0
        return outcome

    @property
    def context_tokens(self) -> int:
        configured = self.world.model.context_tokens or getattr(self.backend, "context_tokens", None)
        return int(configured or DEFAULT_CONTEXT_TOKENS)

    def _fit(self, call: Call, notes: list[str]) -> Prompt | None:
        """The prompt with as much recent history as fits the budget (the oldest turns go first), or None when
        not even the prompt without history fits. Compaction only grows, so later prompts share a prefix."""
        session = call.session
        budget = prompt_budget(self.context_tokens, self.params.max_tokens)
        start = min(session.compacted, len(session.history))
        while True:
            shown_notes = [compaction_note(start), *notes] if start else notes
            prompt = session.transcript.prompt(
                self.system_prompt(session, call.tool.name),
                call.tool.name,
                call.arguments,
                shown_notes,
                start=start,
            )
            if estimate_tokens(prompt.messages, prompt.chars) <= budget:
                break
            if start >= len(session.history):
                return None
            # Drop at least a quarter of what is shown, so a long session compacts in a few steps, not thousands.
            start += max(1, (len(session.history) - start) // 4)
        if start > session.compacted:
            session.compacted = start
        call.compacted = start
        return prompt

    async def _generate_observation(self, call: Call, messages: list[dict[str, str]]) -> CallOutcome:
        """`model.timeout_s` bounds the whole call: every output retry shares one deadline."""
        timeout_s = self.world.model.timeout_s
        with anyio.move_on_after(timeout_s) as deadline:
            return await self._attempts(call, messages)
        assert deadline.cancelled_caught
        call.error = f"no valid observation within timeout_s = {timeout_s:g} s ({call.attempts} attempt(s))"
        call.observation = None
        return CallOutcome(
            f"The simulated tool {call.tool.name} timed out: no valid result within {timeout_s:g} s "
            f"({call.attempts} attempt(s); model.timeout_s bounds the whole call)",
            is_error=True,
        )

    async def _attempts(self, call: Call, messages: list[dict[str, str]]) -> CallOutcome:
        tool, report = call.tool, call.report
        done_tokens = 0
        problem = ""
        for attempt in range(self.output_retries + 1):
            call.attempts = attempt + 1
            params = replace(
                self.params,
                seed=call_seed(self.world.seed, call.index, attempt),
                constraint=constraint_for(tool, self.world.domain) if self.world.model.constrained else None,
            )

            async def on_progress(tokens: int, message: str, _base: int = done_tokens) -> None:
                if report is not None:
                    await report(
                        float(_base + tokens), f"simulating {tool.name}: {tokens} tokens ({message})"
                    )

            try:
                generation: Generation = await self.backend.generate(
                    messages, params, on_progress, CallRef(tool.name, call.arguments, call.index)
                )
            except BackendError as exc:
                call.error = str(exc)
                return CallOutcome(f"The world model could not answer this call: {exc}", is_error=True)
            too_large = answer_size_problem(generation, params.max_answer_bytes)
            if too_large is not None:  # any backend's: the OpenAI one already stops reading there
                call.error = str(too_large)
                return CallOutcome(f"The world model could not answer this call: {too_large}", is_error=True)
            done_tokens += generation.completion_tokens or 0
            notice = generation.extra.get("notice")
            if isinstance(notice, str) and notice:
                # The backend labels this answer itself (a demo answer replayed for other arguments): the MCP
                # result and the trajectory say so.
                call.notice = notice
            call.raw, call.reasoning = generation.text, generation.reasoning or None
            if answer_size(generation) > INLINE_ANSWER_BYTES:  # parsing and validation would hold the loop
                observation, outcome, problem = await anyio.to_thread.run_sync(self._read, tool, generation)
            else:
                observation, outcome, problem = self._read(tool, generation)
            if observation:
                call.observation = observation
            if outcome is not None:
                call.structured = outcome.structured
                return outcome
        call.error = f"no valid observation after {self.output_retries + 1} attempts: {problem}"
        call.observation = None
        return CallOutcome(
            f"The simulated tool {tool.name} did not produce a valid result after {self.output_retries + 1} "
            f"attempts: {problem}",
            is_error=True,
        )

    def _read(self, tool: ToolSpec, generation: Generation) -> tuple[str, CallOutcome | None, str]:
        """The answer's observation and its outcome, or (observation, None, why it is not valid). Plain CPU work
        with no event-loop state: a big answer is read in a worker thread."""
        observation = parse_answer(generation.text, generation.reasoning).observation
        if not observation:
            return "", None, "the world model returned an empty observation"
        if not tool.structured:
            error = self.world.domain == "mcp" and looks_like_error(observation)
            return observation, CallOutcome(observation, is_error=error), ""
        outcome, problem = self._structured(tool, observation)
        return observation, outcome, problem

    def _structured(self, tool: ToolSpec, observation: str) -> tuple[CallOutcome | None, str]:
        """A structured observation that validates, a realistic error, or (None, why it failed)."""
        try:
            value = parse_json_observation(observation)
        except ValueError:
            if looks_like_error(observation):
                return CallOutcome(observation, is_error=True), ""
            return None, "the observation is not JSON although the tool has an outputSchema"
        assert tool.outputSchema is not None
        value = tool.wrap_result(value)
        problem = tool.output_problem(value)
        if problem is None:
            return CallOutcome(render_result(value), structured=value), ""
        if looks_like_error(observation):
            return CallOutcome(render_result(value), is_error=True), ""
        return None, f"the observation does not match outputSchema {problem}"
