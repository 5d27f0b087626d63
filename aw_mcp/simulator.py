"""The call pipeline: validate arguments → world model → parse → validate the output → record.

Every failure inside a call becomes an `isError` outcome the agent can read; only an unknown tool is a protocol
error (the server maps UnknownToolError to JSON-RPC -32602).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio
import jsonschema

from aw_mcp.backends.base import BackendError, CallRef, Generation, GenerationParams, WorldModel
from aw_mcp.prompting import (
    build_messages,
    messages_hash,
    parse_answer,
    parse_json_observation,
    render_result,
)
from aw_mcp.session import CallRecord, SessionRegistry, WorldSession
from aw_mcp.world import ModelSettings, ToolSpec, WorldSpec, schema_validator

Reporter = Callable[[float, str], Awaitable[None]]
"""Progress sink: (monotonically increasing progress, message)."""

# Tool-execution failures as a real API would phrase them; for `mcp` worlds such an observation is an isError result.
_ERROR_TEXT = re.compile(
    r"^\s*(?:error\b|[\w.]*(?:error|exception)\s*:|(?:http\s*)?[45]\d\d\s+[a-z]|\{\s*\"(?:error|errors)\"\s*:)",
    re.IGNORECASE,
)


class UnknownToolError(LookupError):
    def __init__(self, name: str, known: list[str]):
        super().__init__(f"Unknown tool: {name!r}. Tools in this world: {', '.join(known)}")
        self.name = name


@dataclass
class CallOutcome:
    text: str
    structured: Any = None
    is_error: bool = False
    record: CallRecord | None = None


def params_from_settings(settings: ModelSettings) -> GenerationParams:
    return GenerationParams(
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        max_tokens=settings.max_tokens,
        thinking=settings.thinking,
    )


def argument_errors(tool: ToolSpec, arguments: dict[str, Any]) -> list[str]:
    """Every schema violation, each naming the field it concerns."""
    validator = schema_validator(tool.inputSchema)
    problems = []
    for error in sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in error.absolute_path)
        problems.append(f"field `{where}`: {error.message}" if where else error.message)
    return problems


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
    ):
        self.world = world
        self.backend = backend
        self.registry = registry or SessionRegistry(world)
        self.params = params or params_from_settings(world.model)
        self.output_retries = world.model.output_retries if output_retries is None else output_retries

    def tool(self, name: str) -> ToolSpec:
        tool = self.world.tool(name)
        if tool is None:
            raise UnknownToolError(name, [t.name for t in self.world.tools])
        return tool

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        session_key: str | None = None,
        report: Reporter | None = None,
    ) -> CallOutcome:
        tool = self.tool(name)
        arguments = dict(arguments or {})
        session = self.registry.get(session_key)
        record = CallRecord(
            world=self.world.name,
            session=session.id,
            index=session.claim_index(),
            tool=name,
            arguments=arguments,
        )
        started = time.perf_counter()
        try:
            outcome = await self._run(tool, arguments, session, record, report)
        except anyio.get_cancelled_exc_class():
            record.error = "cancelled by the client"
            record.latency_ms = (time.perf_counter() - started) * 1000
            self.registry.record(session, record)
            raise
        except Exception as exc:  # a bug must cost one call, never the server
            outcome = CallOutcome(f"Internal simulator error while calling {name}: {exc}", is_error=True)
            record.error = f"{type(exc).__name__}: {exc}"
        record.latency_ms = (time.perf_counter() - started) * 1000
        record.is_error = outcome.is_error
        if record.observation is None:  # what the agent saw, even for failures
            record.observation = outcome.text
        outcome.record = record
        self.registry.record(session, record)
        return outcome

    async def _run(
        self,
        tool: ToolSpec,
        arguments: dict[str, Any],
        session: WorldSession,
        record: CallRecord,
        report: Reporter | None,
    ) -> CallOutcome:
        problems = argument_errors(tool, arguments)
        if problems:
            record.error = "invalid arguments"
            text = f"Invalid arguments for tool {tool.name}: " + "; ".join(problems)
            return CallOutcome(text, is_error=True)
        messages = build_messages(self.world, session.system_prompt, session.history, tool.name, arguments)
        record.messages_hash = messages_hash(messages)
        return await self._generate_observation(tool, arguments, messages, record, report)

    async def _generate_observation(
        self,
        tool: ToolSpec,
        arguments: dict[str, Any],
        messages: list[dict[str, str]],
        record: CallRecord,
        report: Reporter | None,
    ) -> CallOutcome:
        done_tokens = 0
        problem = ""
        for attempt in range(self.output_retries + 1):
            record.attempts = attempt + 1
            params = replace(self.params, seed=call_seed(self.world.seed, record.index, attempt))

            async def on_progress(tokens: int, message: str, _base: int = done_tokens) -> None:
                if report is not None:
                    await report(
                        float(_base + tokens), f"simulating {tool.name}: {tokens} tokens ({message})"
                    )

            try:
                generation: Generation = await self.backend.generate(
                    messages, params, on_progress, CallRef(tool.name, arguments, record.index)
                )
            except BackendError as exc:
                record.error = str(exc)
                return CallOutcome(f"The world model could not answer this call: {exc}", is_error=True)
            done_tokens += generation.completion_tokens or 0
            record.raw, record.reasoning = generation.text, generation.reasoning or None
            parsed = parse_answer(generation.text, generation.reasoning)
            observation = parsed.observation
            if not observation:
                problem = "the world model returned an empty observation"
                continue
            record.observation = observation
            if not tool.structured:
                return CallOutcome(
                    observation, is_error=self.world.domain == "mcp" and looks_like_error(observation)
                )
            outcome, problem = self._structured(tool, observation)
            if outcome is not None:
                record.structured = outcome.structured
                return outcome
        record.error = f"no valid observation after {self.output_retries + 1} attempts: {problem}"
        record.observation = None
        return CallOutcome(
            f"The simulated tool {tool.name} did not produce a valid result after {self.output_retries + 1} "
            f"attempts: {problem}",
            is_error=True,
        )

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
        bad = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(tool.outputSchema).iter_errors(value)
        )
        if bad is None:
            return CallOutcome(render_result(value), structured=value), ""
        if looks_like_error(observation):
            return CallOutcome(render_result(value), is_error=True), ""
        where = "/".join(str(p) for p in bad.absolute_path) or "(root)"
        return None, f"the observation does not match outputSchema at {where}: {bad.message}"
