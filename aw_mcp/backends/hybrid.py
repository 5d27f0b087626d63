"""`--backend hybrid --replay TRAJECTORY`: what the recording knows is answered from it, the rest by the world model.

A call is answered from the recording when the recording holds the same call (tool and arguments, canonical JSON)
after the same calls in its session, so a rerun of the recorded agent replays its calls in order; for a tool
annotated `readOnlyHint: true` the same call anywhere in the recording will do, since reading twice changes
nothing. Any other call goes to the world model, whose prompt shows the session's history as always: up to the
first unmatched call that history is the recording's own answers, so the model continues from what the real system
said. Each answer says where it came from (`Generation.extra["answered_by"]`: "recording", or what the model's
side says, "model" or "cache"), and the simulator puts that on the record and the result's `_meta`.

The recording's answer is the world model's raw output when the recording has one (a recorded simulation), else the
real observation (a recording of `aw-mcp mirror`), before any fault changed it (`truth`); the world's own faults
apply again after it. Calls that never got an answer (cancelled, refused before any answer) are not replayed.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.replay import CallKey, call_key
from aw_mcp.core.model_io import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import CallRecord, TrajectoryFormatError, read_trajectory

Prefix = tuple[CallKey, ...]


def recorded_answer(record: CallRecord) -> Generation | None:
    """What the recording answered this call with, as a backend answer; None when it has no answer to give."""
    if record.raw is not None:
        return Generation(text=record.raw, reasoning=record.reasoning or "")
    text = record.truth if record.truth is not None else record.observation
    if text is None or (record.truth is None and not record.in_history):
        return None  # cancelled, or what the agent saw was a fault's, not the system's
    return Generation(text=text)


def session_calls(records: list[CallRecord]) -> dict[str | None, list[CallRecord]]:
    """Each recorded session's calls in index order, a fork's inherited calls (its parent's before the fork
    point) first."""
    own: dict[str | None, list[CallRecord]] = defaultdict(list)
    for record in records:
        own[record.session].append(record)
    for calls in own.values():
        calls.sort(key=lambda r: r.index)

    def whole(session: str | None, depth: int = 0) -> list[CallRecord]:
        calls = own.get(session, [])
        fork = next((r.forked_from for r in calls if r.forked_from is not None), None)
        if fork is None or depth > len(own):  # a fork loop in a hand-edited file: stop
            return calls
        inherited = [r for r in whole(fork.session, depth + 1) if r.index < fork.call]
        return inherited + [r for r in calls if r.index >= fork.call]

    return {session: whole(session) for session in own}


class Recording:
    """A trajectory's answers, keyed for the hybrid's two kinds of match."""

    def __init__(self, records: list[CallRecord]) -> None:
        self.after: dict[tuple[Prefix, CallKey], Generation] = {}  # (the calls before, this call) -> answer
        self.anywhere: dict[CallKey, Generation] = {}  # this call's first recorded answer
        for calls in session_calls(records).values():
            keys = [call_key(r.tool, r.arguments) for r in calls]
            for position, record in enumerate(calls):
                answer = recorded_answer(record)
                if answer is None:
                    continue
                self.after.setdefault((tuple(keys[:position]), keys[position]), answer)
                self.anywhere.setdefault(keys[position], answer)

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        try:
            return cls(list(read_trajectory(path)))
        except TrajectoryFormatError as error:
            raise BackendError(f"hybrid: {error}") from None

    def answer(self, call: CallRef, read_only: bool) -> Generation | None:
        key = call_key(call.tool, call.arguments)
        prefix = tuple(call_key(tool, arguments) for tool, arguments in call.history)
        found = self.after.get((prefix, key))
        if found is None and read_only:
            found = self.anywhere.get(key)
        if found is None:
            return None
        # A fresh copy: the caller may annotate `extra`, and the recording stays as it was.
        return Generation(text=found.text, reasoning=found.reasoning, extra={"answered_by": "recording"})


class HybridWorldModel(WorldModel):
    """The recording first; the world model (`model`, maybe behind the answer cache) for everything else."""

    def __init__(self, path: str | Path, world: WorldSpec, model: WorldModel) -> None:
        self.path = Path(path)
        self.recording = Recording.load(self.path)
        self.read_only = {
            tool.name
            for tool in world.tools
            if tool.annotations is not None and tool.annotations.readOnlyHint
        }
        self.model = model
        self.name = f"hybrid({model.name})"
        self.answered: dict[str, int] = defaultdict(int)  # by source, for the caller's summary

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        if call is not None:
            recorded = self.recording.answer(call, call.tool in self.read_only)
            if recorded is not None:
                self.answered["recording"] += 1
                return recorded
        generation = await self.model.generate(messages, params, on_progress, call)
        source: Any = generation.extra.get("answered_by")
        if not isinstance(source, str):
            source = "model"
            generation.extra["answered_by"] = source  # said explicitly: a hybrid's every answer is marked
        self.answered[source] += 1
        return generation

    async def preload(self) -> bool:
        return await self.model.preload()

    async def aclose(self) -> None:
        await self.model.aclose()
