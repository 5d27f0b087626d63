"""Worlds in-process, for RL trainers and evaluators: `from aw_mcp import Env`.

    async with await Env.open("mcp_crm", backend="demo", seed=7) as env:
        result = await env.call("search_contacts", {"query": "murphy"})   # the CallToolResult an MCP client gets
        children = await env.fork(8)                                       # 8 independent copies of this world
        ...

An `Env` is one world session with a simulator of its own (its tool catalog, fault position, history, ledger and
clock), driven without MCP framing. Every `Env` opened with the same backend options in one process shares one
backend: one engine whose step loop batches all their calls, or one OpenAI-compatible server's connection pool.
The backend is closed when the last `Env` using it closes.

A fork copies the world at its current point (history, ledger, clock, catalog, fault-planner position); from then
on each child diverges on its own. Sampling seeds derive from the world's seed and the call index, so with a
deterministic backend two forks given the same actions see the same observations and the same faults fire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import mcp.types as types
from mcp import MCPError

from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.resolve import BackendChoice, open_backend
from aw_mcp.sim.registry import MAX_FORKS_PER_REQUEST as MAX_FORKS
from aw_mcp.sim.session import SessionKeyError, WorldSession
from aw_mcp.sim.simulator import Simulator, UnknownToolError
from aw_mcp.sim.world_setup import WorldOptions, setup_world
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import CallRecord, ForkPoint


@dataclass
class _Lease:
    backend: WorldModel
    users: int = 0


@dataclass
class _SharedBackends:
    """One opened backend per backend choice (and world, for the backends that answer from a world's own data),
    counted by the envs that use it."""

    leases: dict[tuple[Any, ...], _Lease] = field(default_factory=dict)

    @staticmethod
    def _key(choice: BackendChoice, world: WorldSpec, trust_world_backend: bool) -> tuple[Any, ...]:
        per_world = choice.backend in ("demo", "replay")  # they answer from this world's examples / recording
        return (choice, trust_world_backend, id(world) if per_world else None)

    def acquire(self, choice: BackendChoice, world: WorldSpec, trust_world_backend: bool) -> tuple[Any, ...]:
        key = self._key(choice, world, trust_world_backend)
        lease = self.leases.get(key)
        if lease is None:
            lease = self.leases[key] = _Lease(open_backend(choice, world.model, world, trust_world_backend))
        lease.users += 1
        return key

    def backend(self, key: tuple[Any, ...]) -> WorldModel:
        return self.leases[key].backend

    def share(self, key: tuple[Any, ...]) -> None:
        self.leases[key].users += 1

    async def release(self, key: tuple[Any, ...]) -> None:
        lease = self.leases.get(key)
        if lease is None:
            return
        lease.users -= 1
        if lease.users <= 0:
            del self.leases[key]
            await lease.backend.aclose()


_SHARED = _SharedBackends()


class Env:
    """One simulated world, driven in-process. Open with `Env.open`; close with `close()` or `async with`."""

    def __init__(self, simulator: Simulator, lease: tuple[Any, ...] | None):
        # No lease: no model was opened (an answer cache in replay-only mode answers every call).
        self._simulator = simulator
        self._lease = lease
        self._closed = False

    @classmethod
    async def open(
        cls,
        world: str | Path,
        *,
        backend: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        seed: int | None = None,
        **options: Any,
    ) -> Env:
        """A fresh session of `world` (a bundled world's name or a YAML path), with the backend options of
        `aw-mcp serve` (`backend="demo"`, `base_url=...`, `model=...`, `replay=...`, `device=...`,
        `temperature=...`, `thinking=...`, `preset=[...]`, `record=PATH`, `resume=PATH`, `at=K`, ...)."""
        settings = WorldOptions(
            world=str(world), backend=backend, base_url=base_url, model=model, seed=seed, **options
        )
        leases: list[tuple[Any, ...]] = []

        def shared_backend(choice: BackendChoice, spec: WorldSpec) -> WorldModel:
            leases.append(_SHARED.acquire(choice, spec, settings.trust_world_backend))
            return _SHARED.backend(leases[-1])

        setup = await anyio.to_thread.run_sync(lambda: setup_world(settings, open_model=shared_backend))
        registry = setup.simulator.registry
        if not settings.resume:  # its own session id, so many envs can share one trajectory file
            registry.default_key = registry.new_key()
        return cls(setup.simulator, leases[0] if leases else None)

    # --- the world ----------------------------------------------------------------------------------------------

    @property
    def session(self) -> WorldSession:
        return self._simulator.registry.get()

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def world(self) -> WorldSpec:
        return self._simulator.world

    @property
    def tools(self) -> list[types.Tool]:
        """The MCP tool list as an agent would list it now (catalog faults change it)."""
        return [types.Tool.model_validate(t.wire()) for t in self._simulator.catalog.tools]

    @property
    def trajectory(self) -> list[CallRecord]:
        """This env's calls so far, inherited ones (before a fork) included, in call order."""
        return sorted(self.session.records, key=lambda r: r.index)

    # --- acting -------------------------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> types.CallToolResult:
        """One tool call. Returns the CallToolResult an MCP client gets; raises MCPError where an MCP client gets
        a JSON-RPC error (an unknown tool, a `protocol_error` fault)."""
        self._check_open()
        try:
            outcome = await self._simulator.call(tool, dict(arguments or {}))
        except (UnknownToolError, SessionKeyError) as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        if outcome.protocol_error is not None:
            code, message = outcome.protocol_error
            raise MCPError(code=code, message=message)
        return outcome.result()

    async def fork(self, n: int) -> list[Env]:
        """`n` independent copies of this world at its current point, 1 <= n <= MAX_FORKS (256, as for
        `POST /sessions/{id}/fork`). They are copied in a worker thread from one snapshot taken now, so other
        sessions keep running meanwhile and a call on this env that starts meanwhile does not reach them."""
        self._check_open()
        if not 1 <= n <= MAX_FORKS:
            raise ValueError(f"fork makes 1 to {MAX_FORKS} copies at a time, not {n:,} (fork again for more)")
        session = self.session
        point = ForkPoint(session=session.id, call=session.next_index)
        snapshot = self._simulator.spin_off(session)
        twins = await anyio.to_thread.run_sync(
            lambda: [snapshot.spin_off(snapshot.registry.get()) for _ in range(n)]
        )
        children = []
        for twin in twins:
            twin.registry.get().forked_from = point  # forked from this env, not from the snapshot
            if self._lease is not None:
                _SHARED.share(self._lease)
            children.append(Env(twin, self._lease))
        return children

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._lease is not None:
            await _SHARED.release(self._lease)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Env is closed")

    async def __aenter__(self) -> Env:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


async def close_all(envs: Sequence[Env]) -> None:
    """Close many envs (e.g. a fork group) at once."""
    for env in envs:
        await env.close()
