"""The call pipeline: validate arguments → perturb (before) → world model → parse/validate → perturb (after) → record.

Every failure inside a call becomes an `isError` answer the agent can read; only an unknown tool is a protocol error
(the server maps UnknownToolError to JSON-RPC -32602), and a `protocol_error` fault asks for one on purpose.

One `Call` (call.py) is the context every step here and in `fault_phases.py` reads; each step returns an `Answer`
(answer.py) that the next one takes, and none is written back. The perturbations that fire on a call are applied by
`fault_phases.py`, each by its kind's entry in `fault_kinds.py`: before the world model (delay, abort, replay,
instruct) and after it (shape; then catalog changes); docs/perturbations.md lists the order. The call's record is
built from its final answer once, when it commits; the session keeps its history and decides what of it a prompt
shows (`WorldSession.fit`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, get_args

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
    is_context_overflow,
    prompt_budget,
)
from aw_mcp.prompt.catalog import CatalogForm, prompt_definition
from aw_mcp.prompt.constraint import constraint_for
from aw_mcp.prompt.parse import parse_answer, parse_json_observation
from aw_mcp.prompt.render import catalog_form, render_result, render_system_prompt
from aw_mcp.sim import fault_apply, fault_kinds, fault_phases
from aw_mcp.sim.answer import Answer, Generated
from aw_mcp.sim.call import Call
from aw_mcp.sim.clock import SYSTEM_CLOCK, Clock
from aw_mcp.sim.consistency import Guard
from aw_mcp.sim.fault_planner import Planner
from aw_mcp.sim.ledger import Entry
from aw_mcp.sim.progress import Reporter, monotonic
from aw_mcp.sim.registry import SessionRegistry, bulky
from aw_mcp.sim.session import RecordingError, WorldSession
from aw_mcp.spec.injections import BUILTIN_INJECTIONS
from aw_mcp.spec.world import ModelSettings, ToolSpec, WorldSpec
from aw_mcp.trajectory.records import AnsweredBy, CallRecord, Consistency

log = logging.getLogger(__name__)

# Tool-execution failures as a real API would phrase them; for `mcp` worlds such an observation is an isError result.
_ERROR_TEXT = re.compile(
    r"^\s*(?:error\b|[\w.]*(?:error|exception)\s*:|(?:http\s*)?[45]\d\d\s+[a-z]|\{\s*\"(?:error|errors)\"\s*:)",
    re.IGNORECASE,
)


# Answers larger than this are parsed and validated in a worker thread, so a big one never holds the event loop
# (other sessions' requests and pings); smaller ones stay inline, where a thread hop would cost more than the work.
INLINE_ANSWER_BYTES = 64 * 1024

ANSWERED_BY: tuple[str, ...] = get_args(AnsweredBy)


class UnknownToolError(UserError, LookupError):
    def __init__(self, name: str, known: list[str]):
        super().__init__(f"Unknown tool: {name!r}. Tools in this world: {', '.join(known)}")
        self.name = name


@dataclass(frozen=True)
class CallOutcome:
    """A committed call: its final answer and its trajectory record (`committed`: False when the trajectory could
    not be written, and the answer then says so)."""

    answer: Answer
    record: CallRecord
    committed: bool = True

    @property
    def text(self) -> str:
        return self.answer.text

    @property
    def structured(self) -> Any:
        return self.answer.structured

    @property
    def is_error(self) -> bool:
        return self.answer.is_error

    @property
    def protocol_error(self) -> tuple[int, str] | None:
        """(JSON-RPC code, message): answer the request with this error, not a result."""
        return self.answer.protocol_error

    @property
    def catalog_changed(self) -> bool:
        """The tool list changed: the server notifies clients."""
        return fault_phases.changed_catalog(self.record.faults)

    def result(self) -> types.CallToolResult:
        """The MCP result the agent gets (over MCP and through aw_mcp.Env alike): the observation, a line saying
        so when the answer is not the world model's (demo), structured content unless it is an error."""
        content: list[Any] = [types.TextContent(type="text", text=self.text)]
        if self.answer.content is not None and self.answer.content[0] == self.text:
            content = list(self.answer.content[1])  # a real server's answer, unchanged by any fault
        if self.record.notice:
            content.append(types.TextContent(type="text", text=f"[{self.record.notice}]"))
        generated = self.answer.generated
        named = self.record.answered_by != "model" or (generated is not None and generated.answered_by)
        return types.CallToolResult(
            content=content,
            structured_content=self.structured if not self.is_error else None,
            is_error=self.is_error,
            # where the answer came from, whenever anything but a plain world model answered (or was asked to say)
            _meta={"answered_by": self.record.answered_by} if named else None,
        )


OnCommit = Callable[[CallRecord], Awaitable[None]]
"""Told each record a call commits (the unknown-tool and cancelled ones too), shielded from cancellation."""


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
    checks_arguments = True  # arguments validated against the tool's inputSchema before anything else

    def __init__(
        self,
        world: WorldSpec,
        backend: WorldModel,
        registry: SessionRegistry | None = None,
        params: GenerationParams | None = None,
        output_retries: int | None = None,
        template: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.world = world
        self.clock = clock  # each call's record `time` and `latency_ms`
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
        self.guard = Guard(world)  # the consistency guard's view of each session
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

    async def fork(self, key: str | None, n: int) -> list[WorldSession]:
        """`n` sessions forked from session `key` at its current point, continuing its fault sequence. They share
        this world's tool catalog, as every session served by one server does (MCP: one tool list per server).
        At most MAX_FORKS_PER_REQUEST, copied off the event loop from one snapshot (registry.py)."""
        parent = key or self.registry.default_key
        snapshot = self.registry.fork_snapshot(parent, n)
        new_key = self.registry.new_key
        children = await anyio.to_thread.run_sync(lambda: [snapshot.fork(new_key()) for _ in range(n)])
        self.registry.take_forks(parent, children)
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
        twin = Simulator(
            self.world, self.backend, registry, self.params, self.output_retries, self.template, self.clock
        )
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
        on_commit: OnCommit | None = None,
    ) -> CallOutcome:
        arguments = dict(arguments or {})
        session = self.registry.get(session_key)
        tool = self.catalog.get(name)
        if tool is None:
            raise await self._record_unknown(name, arguments, session, on_commit)
        session.busy += 1
        try:
            if session not in self._system_prompts:  # a session's first call: its world (maybe megabytes of
                with contextlib.suppress(Exception):  # state) is rendered off the loop; a failure shows below
                    await anyio.to_thread.run_sync(self.system_prompt, session, name)
            return await self._commit(self._start(tool, arguments, session, report), on_commit)
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
            time=self.clock.now(),
            notice=getattr(self.backend, "notice", None),
            seed=self.world.seed,
            slots=self.slots,
            catalog=self.catalog,
        )

    async def _save(self, session: WorldSession, record: CallRecord, on_commit: OnCommit | None) -> None:
        """Commit one record (RecordingError: it was not), and tell `on_commit`."""
        await self.registry.commit(session, record)
        if on_commit is not None:
            with anyio.CancelScope(shield=True):
                await on_commit(record)

    async def _record_unknown(
        self, name: str, arguments: dict[str, Any], session: WorldSession, on_commit: OnCommit | None
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
            time=self.clock.now(),
            forked_from=session.forked_from,
            observation=str(error),
            is_error=True,
            error="unknown tool",
            in_history=False,
        )
        try:
            await self._save(session, record, on_commit)
        except RecordingError as exc:
            log.warning("call to unknown tool %r not recorded: %s", name, exc)
        return error

    async def _commit(self, call: Call, on_commit: OnCommit | None) -> CallOutcome:
        """One call, committed once: its record, built from the final answer, is written ahead and only then enters
        the session's history; a call the client gave up on is recorded as cancelled, whatever answer arrived
        after."""
        name = call.tool.name
        started = self.clock.elapsed()
        try:
            answer = await self._run(call)
            await anyio.lowlevel.checkpoint_if_cancelled()  # the client gave up while the answer arrived
        except anyio.get_cancelled_exc_class():
            record = call.record(None, latency_ms=(self.clock.elapsed() - started) * 1000)
            with contextlib.suppress(RecordingError):
                await self._save(call.session, record, on_commit)
            raise
        except Exception as exc:  # a bug must cost one call, never the server
            answer = Answer(
                f"Internal simulator error while calling {name}: {exc}",
                is_error=True,
                error=f"{type(exc).__name__}: {exc}",
            )
        record = call.record(answer, latency_ms=(self.clock.elapsed() - started) * 1000)
        try:
            await self._save(call.session, record, on_commit)
        except RecordingError as exc:  # the world did not take this call in: neither may the agent
            refused = Answer(
                f"The call to {name} could not be recorded, so it did not happen: {exc}", is_error=True
            )
            return CallOutcome(refused, record, committed=False)
        return CallOutcome(answer, record)

    async def _run(self, call: Call) -> Answer:
        # In a worker thread: a big argument's check may take its whole budget (spec/check_budget.py).
        # A mirror lets the real server judge the arguments itself (its own error is the answer).
        check = call.tool.argument_problems if self.checks_arguments else _no_problems
        problems = await anyio.to_thread.run_sync(check, call.arguments)
        if problems:
            text = f"Invalid arguments for tool {call.tool.name}: " + "; ".join(problems)
            return Answer(text, is_error=True, error="invalid arguments")
        pending = [p for p in self.perturbations if p.name not in self.catalog.applied]
        history = (
            [
                (r.tool, r.arguments, r.is_error or r.error is not None)
                for r in sorted(call.session.records, key=lambda r: r.index)
            ]
            if pending
            else []
        )
        firings = self.planner.plan(call.session.id, history, call.tool.name, call.arguments, only=pending)
        call = replace(call, firings=tuple(firings))  # the same fault log: a cancel still records its entries
        try:
            return await self._perturbed(call)
        finally:
            fault_phases.change_catalog(call)

    async def _perturbed(self, call: Call) -> Answer:
        """perturb (before) → [the unperturbed answer, where a fault wants it] → prompt → world model → parse →
        perturb (after)."""
        plan = await fault_phases.before(call)
        if plan.answer is not None and not plan.wants_truth:
            return plan.answer
        # What earlier calls established, read once the before-phase's waits are over.
        notes, ledger = self._notes(call), call.session.ledger.entries(self._tool_or_original)
        if plan.wants_truth:
            plan = fault_phases.settle_truth(call, plan, await self._generate(call, notes, ledger))
        if plan.answer is not None:
            return plan.answer
        return fault_phases.after(call, plan, await self._guarded(call, [*notes, *plan.notes], ledger))

    def _tool_or_original(self, name: str) -> ToolSpec | None:
        return self.catalog.get(name) or self.world.tool(name)

    def _notes(self, call: Call) -> list[str]:
        """The notes of this call that hold at any compaction (the ledger's depend on it: WorldSession.fit)."""
        if call.tool.name not in self.catalog.added:
            return []
        # The world model's system prompt predates this tool: its definition, as the catalog lists tools.
        definition = json.dumps(prompt_definition(call.tool), ensure_ascii=False)
        return [f"This tool was added to the API during the session; its definition: {definition}"]

    async def _guarded(self, call: Call, notes: list[str], ledger: Sequence[Entry]) -> Answer:
        """The world model's answer checked against what the session established (sim/consistency.py): with
        `model.on_contradiction: resample`, up to `model.max_resamples` more answers are drawn and the first that
        contradicts nothing is kept (else the first); what was found goes on the record."""
        settings = self.world.model
        answer = await self._generate(call, notes, ledger)
        if settings.on_contradiction == "off" or answer.error is not None or call.answered_by == "upstream":
            return answer  # a real server's answer is what it is
        known = self.guard.established(call.session)
        found = known.check(
            call.tool.name, call.arguments, answer.recorded_observation, answer.structured, answer.is_error
        )
        kept, drawn, kept_at = answer, 1, 1
        fixed = answer.generated is not None and answer.generated.answered_by == "recording"  # same each time
        while (
            found
            and settings.on_contradiction == "resample"
            and drawn <= settings.max_resamples
            and not fixed
        ):
            retry = await self._generate(call, notes, ledger, draw=drawn)
            drawn += 1
            if retry.error is None and not known.check(
                call.tool.name, call.arguments, retry.recorded_observation, retry.structured, retry.is_error
            ):
                kept, found, kept_at = retry, [], drawn
                break
        if drawn == 1 and not found:
            return answer
        verdict = Consistency(contradictions=found, drawn=drawn, kept=kept_at)
        return replace(kept, generated=replace(kept.generated or Generated(), consistency=verdict))

    async def _generate(
        self, call: Call, notes: list[str], ledger: Sequence[Entry] = (), draw: int = 0
    ) -> Answer:
        """Ask the world model for this call, with these notes (and what of the ledger the prompt needs); `draw`:
        the how-many-th answer to this call the consistency guard asks for (its own seeds)."""
        tool, session = call.tool, call.session
        budget = prompt_budget(self.context_tokens, self.params.max_tokens)
        system = self.system_prompt(session, tool.name)
        # Big arguments are rendered off the loop, when no other call of the session could touch it meanwhile.
        if bulky(call.arguments) and session.busy <= 1:
            fitted = await anyio.to_thread.run_sync(
                session.fit, system, tool.name, call.arguments, notes, budget, ledger
            )
        else:
            fitted = session.fit(system, tool.name, call.arguments, notes, budget, ledger)
        if fitted is None:
            return Answer(
                f"This call to {tool.name} cannot be simulated: its prompt alone needs more than the world "
                f"model's context of {self.context_tokens:,} tokens (less {self.params.max_tokens:,} reserved for "
                "the answer). Send smaller arguments.",
                is_error=True,
                error="prompt does not fit the context",
            )
        prompt, start = fitted
        answer = await self._generate_observation(
            call, prompt.messages, Generated(messages_hash=prompt.hash, compacted=start), draw
        )
        if answer.error is not None and is_context_overflow(answer.error):
            session.overflowed()  # the server counted more tokens than the estimate
        return answer

    @property
    def context_tokens(self) -> int:
        configured = self.world.model.context_tokens or getattr(self.backend, "context_tokens", None)
        return int(configured or DEFAULT_CONTEXT_TOKENS)

    async def _generate_observation(
        self, call: Call, messages: list[dict[str, str]], prompted: Generated, draw: int = 0
    ) -> Answer:
        """`model.timeout_s` bounds the whole call: every output retry shares one deadline."""
        timeout_s = self.world.model.timeout_s
        tries = _Tries(prompted)
        with anyio.move_on_after(timeout_s) as deadline:
            return await self._attempts(call, messages, tries, draw)
        assert deadline.cancelled_caught
        attempts = tries.generated.attempts
        return Answer(
            f"The simulated tool {call.tool.name} timed out: no valid result within {timeout_s:g} s "
            f"({attempts} attempt(s); model.timeout_s bounds the whole call)",
            is_error=True,
            error=f"no valid observation within timeout_s = {timeout_s:g} s ({attempts} attempt(s))",
            generated=tries.generated,
        )

    async def _attempts(
        self, call: Call, messages: list[dict[str, str]], tries: _Tries, draw: int = 0
    ) -> Answer:
        tool, report = call.tool, call.report
        history = tuple(  # the calls before this one, for a backend that answers by them (the hybrid)
            (r.tool, r.arguments)
            for r in sorted(call.session.records, key=lambda r: r.index)
            if r.index < call.index
        )
        done_tokens = 0
        problem = ""
        for attempt in range(self.output_retries + 1):
            tries.generated = replace(tries.generated, attempts=attempt + 1)
            params = replace(
                self.params,
                seed=call_seed(self.world.seed, call.index, draw * (self.output_retries + 1) + attempt),
                constraint=constraint_for(tool, self.world.domain) if self.world.model.constrained else None,
            )

            async def on_progress(tokens: int, message: str, _base: int = done_tokens) -> None:
                if report is not None:
                    await report(
                        float(_base + tokens), f"simulating {tool.name}: {tokens} tokens ({message})"
                    )

            try:
                generation: Generation = await self.backend.generate(
                    messages, params, on_progress, CallRef(tool.name, call.arguments, call.index, history)
                )
            except BackendError as exc:
                return tries.failed(f"The world model could not answer this call: {exc}", str(exc))
            too_large = answer_size_problem(generation, params.max_answer_bytes)
            if too_large is not None:  # any backend's: the OpenAI one already stops reading there
                return tries.failed(
                    f"The world model could not answer this call: {too_large}", str(too_large)
                )
            done_tokens += generation.completion_tokens or 0
            tries.took(generation)
            if answer_size(generation) > INLINE_ANSWER_BYTES:  # parsing and validation would hold the loop
                observation, answer, problem = await anyio.to_thread.run_sync(self._read, tool, generation)
            else:
                observation, answer, problem = self._read(tool, generation)
            if observation:
                tries.observation = observation
            if answer is not None:
                return replace(answer, observation=observation, generated=tries.generated)
        return Answer(
            f"The simulated tool {tool.name} did not produce a valid result after {self.output_retries + 1} "
            f"attempts: {problem}",
            is_error=True,
            error=f"no valid observation after {self.output_retries + 1} attempts: {problem}",
            generated=tries.generated,
        )

    def _read(self, tool: ToolSpec, generation: Generation) -> tuple[str, Answer | None, str]:
        """The answer's observation and what the agent gets, or (observation, None, why it is not valid). Plain
        CPU work with no event-loop state: a big answer is read in a worker thread."""
        observation = parse_answer(generation.text, generation.reasoning).observation
        if not observation:
            return "", None, "the world model returned an empty observation"
        if not tool.structured:
            error = self.world.domain == "mcp" and looks_like_error(observation)
            return observation, Answer(observation, is_error=error), ""
        answer, problem = self._structured(tool, observation)
        return observation, answer, problem

    def _structured(self, tool: ToolSpec, observation: str) -> tuple[Answer | None, str]:
        """A structured observation that validates, a realistic error, or (None, why it failed)."""
        try:
            value = parse_json_observation(observation)
        except ValueError:
            if looks_like_error(observation):
                return Answer(observation, is_error=True), ""
            return None, "the observation is not JSON although the tool has an outputSchema"
        assert tool.outputSchema is not None
        value = tool.wrap_result(value)
        problem = tool.output_problem(value)
        if problem is None:
            return Answer(render_result(value), structured=value), ""
        if looks_like_error(observation):
            return Answer(render_result(value), is_error=True), ""
        return None, f"the observation does not match outputSchema {problem}"


def _no_problems(arguments: dict[str, Any]) -> list[str]:
    return []


@dataclass
class _Tries:
    """The world model's attempts at one call so far: kept outside the attempts, which the deadline may cut short."""

    generated: Generated
    observation: str | None = None  # the last attempt's observation, valid or not

    def took(self, generation: Generation) -> None:
        notice = generation.extra.get("notice")
        # The backend labels this answer itself (a demo answer replayed for other arguments): the MCP result and
        # the trajectory say so.
        labelled = notice if isinstance(notice, str) and notice else self.generated.notice
        # Who answered, when the backend says (the cache, the hybrid's recording or model): the record's
        # `answered_by` and the result's `_meta` say it.
        source = generation.extra.get("answered_by")
        self.generated = replace(
            self.generated,
            raw=generation.text,
            reasoning=generation.reasoning or None,
            notice=labelled,
            answered_by=source if source in ANSWERED_BY else None,
        )

    def failed(self, text: str, error: str) -> Answer:
        """The backend gave no answer: the call fails, recording the last observation an attempt had."""
        return Answer(
            text, is_error=True, error=error, observation=self.observation, generated=self.generated
        )
