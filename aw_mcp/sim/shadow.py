"""Shadow predictions (`aw-mcp mirror --shadow`): the world model predicts each real answer off the agent's path.

A prediction starts when its call goes to the upstream, from the prompt the simulated world would have built at that
point (the same history: the real answers of the calls before), runs in this object's task group with at most
`concurrency` at once, and is written beside the call (a `shadow` line, `CallRecord.shadow` on reading) once both
the call is committed and the prediction has ended. The agent never waits for one: its answer is the upstream's, at
the upstream's latency. When the server stops, predictions still running are cancelled and recorded as such, so
every call carries a prediction or the reason it has none.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from aw_mcp.sim.answer import Answer
from aw_mcp.sim.call import Call
from aw_mcp.sim.clock import SYSTEM_CLOCK, Clock
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.trajectory.records import ShadowPrediction, ShadowRecord

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 2
# Predictions waiting for a slot at most; past it a call's prediction is skipped (and says so) rather than queued
# without bound behind a model slower than the upstream.
DEFAULT_MAX_PENDING = 256
SESSION_ENDED = "cancelled: the session ended before the prediction finished"


class Shadow:
    def __init__(
        self,
        registry: SessionRegistry,
        model: str | None,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_pending: int = DEFAULT_MAX_PENDING,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.registry = registry
        self.model = model
        self.limiter = anyio.CapacityLimiter(max(1, concurrency))
        self.max_pending = max_pending
        self.clock = clock
        self.pending = 0
        self.finished = 0  # predictions recorded (tests and the stop message count them)
        self._tg: anyio.abc.TaskGroup | None = None
        self._committed: dict[tuple[str, int], anyio.Event] = {}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Shadow]:
        """Predictions run inside; on the way out those still running are cancelled (and recorded so)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()
                self._tg = None

    def _event(self, session: str, index: int) -> anyio.Event:
        return self._committed.setdefault((session, index), anyio.Event())

    def committed(self, session: str, index: int) -> None:
        """The call's line is written (or will never be): its prediction may be written after it."""
        self._event(session, index).set()

    def predict(self, call: Call, generate: Callable[[], Awaitable[Answer]]) -> None:
        """Start predicting `call` with `generate` (the world model's answer from the call's prompt)."""
        if self._tg is None:
            return
        if self.pending >= self.max_pending:
            skipped = ShadowPrediction(
                model=self.model,
                error=f"skipped: {self.pending} predictions were already waiting for the model",
            )
            self._tg.start_soon(self._save, call, skipped)
            return
        self.pending += 1
        self._tg.start_soon(self._one, call, generate)

    async def _one(self, call: Call, generate: Callable[[], Awaitable[Answer]]) -> None:
        try:
            async with self.limiter:
                started = self.clock.elapsed()
                try:
                    answer = await generate()
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as exc:  # a bug costs this prediction, never the call or the server
                    log.exception("shadow prediction of %s failed", call.tool.name)
                    prediction = ShadowPrediction(model=self.model, error=f"{type(exc).__name__}: {exc}")
                else:
                    prediction = ShadowPrediction(
                        observation=answer.recorded_observation,
                        structured=answer.structured,
                        is_error=answer.is_error,
                        latency_ms=round((self.clock.elapsed() - started) * 1000, 3),
                        model=self.model,
                        error=answer.error,
                    )
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._write(call, ShadowPrediction(model=self.model, error=SESSION_ENDED))
            raise
        finally:
            self.pending -= 1
        await self._save(call, prediction)

    async def _save(self, call: Call, prediction: ShadowPrediction) -> None:
        try:
            await self._event(call.session.id, call.index).wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._write(call, prediction)
            raise
        await self._write(call, prediction)

    async def _write(self, call: Call, prediction: ShadowPrediction) -> None:
        """Beside the call: on its record in memory, and as a `shadow` line after the call's in the trajectory."""
        session = call.session
        self._committed.pop((session.id, call.index), None)
        for record in session.records:
            if record.index == call.index:
                record.shadow = prediction
        writer = self.registry.writer
        if writer is not None:
            line = ShadowRecord(world=call.world, session=session.id, index=call.index, shadow=prediction)
            try:
                await anyio.to_thread.run_sync(writer.write, line)
            except (OSError, ValueError) as exc:
                log.warning("shadow prediction of call %d not recorded: %s", call.index, exc)
        self.finished += 1
