"""Worlds as OpenEnv environments: the Gymnasium-style standard that TRL and torchforge train against.

    from aw_mcp.integrations.openenv import WorldEnvironment, create_app
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

    env = WorldEnvironment("mcp_crm", backend="demo", seed=7)
    first = env.reset()                                     # a fresh session of the world: the tool list
    obs = env.step(CallToolAction(tool_name="search_contacts", arguments={"query": "murphy"}))
    children = env.fork(8)                                  # 8 independent copies of this episode (our extension)

    app = create_app("mcp_crm", backend="demo")             # OpenEnv's own FastAPI server app: /ws, /mcp, /reset, ...

`WorldEnvironment` is an OpenEnv `Environment` that speaks OpenEnv's MCP actions (RFC 003): `ListToolsAction` gives
a `ListToolsObservation`, `CallToolAction` a `CallToolObservation` whose `result` is the tool's MCP result, shaped as
OpenEnv's own `MCPEnvironment` sends it (`content`, `structured_content`, `is_error`, `data`, `meta`; `data` is the
structured content, or the text when the tool gave none). A tool's own failure stays in the result
(`is_error: true`); an unknown tool, a `protocol_error` fault or a timeout is the observation's `error`. `reset()`
opens a fresh session of the world with its seed (or `reset(seed=...)`'s) and answers with the tool list; `state`
is a `WorldState` (episode id, step count, world, session id, seed, calls, forked_from). There is no reward and no
terminal state: worlds have neither; pass OpenEnv's `rubric=` / `transform=` to add them.

Fork, our extension: in-process `env.fork(n)` gives `n` environments, each an independent copy of this episode at
its current point. Over OpenEnv's server, where one client connection is one environment, a new session's
`reset(fork_from=EPISODE_ID)` makes it a copy of that live episode instead of a fresh world, so any OpenEnv client
forks with no new action type: `await client.reset(fork_from=parent_episode_id)` on `n` clients. Forking is the
training loop's business, like reset (RFC 002), so it is not a tool the agent sees.

OpenEnv's server interface is synchronous (with optional `*_async` twins) and runs each session in a thread of its
own, while a world (`aw_mcp.Env`) is async. Every world this module drives therefore lives on one event loop, in a
thread of its own started on first use (one loop, so the backend that all worlds opened with the same options
share is used from one loop); `reset` / `step` / `fork` / `close` hand their work to it through an anyio
`BlockingPortal` and wait, and the `*_async` twins await it without holding a thread.

Needs the `[openenv]` extra: `pip install -e '.[openenv]'`.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import contextvars
import functools
import inspect
import json
import queue
import threading
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp.types as mcp_types
from anyio.from_thread import BlockingPortal
from mcp import MCPError

from aw_mcp.core.errors import UserError
from aw_mcp.core.flags import port_number
from aw_mcp.core.version import __version__
from aw_mcp.env import Env
from aw_mcp.sim.world_setup import WorldOptions
from aw_mcp.spec.bundled import resolve_world_path

INSTALL_HINT = "pip install 'agentworld-mcp[openenv]' (in a checkout: pip install -e '.[openenv]')"


class OpenEnvNotInstalledError(UserError, ImportError):
    """OpenEnv (the `[openenv]` extra) is missing or does not import; the message says how to install it."""


try:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.mcp_types import (
        CallToolAction,
        CallToolObservation,
        ListToolsAction,
        ListToolsObservation,
        Tool,
        ToolError,
        ToolErrorType,
    )
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
except ImportError as exc:
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "openenv":
        message = f"aw_mcp.integrations.openenv needs OpenEnv, which is not installed: {INSTALL_HINT}"
    else:  # e.g. openenv without fastmcp, or fastmcp 3 (mcp<2) next to this package's mcp 2
        message = (
            f"OpenEnv is installed but does not import ({type(exc).__name__}: {exc}); it needs fastmcp>=4 "
            f"(fastmcp 3 requires mcp<2): {INSTALL_HINT}"
        )
    raise OpenEnvNotInstalledError(message) from exc

T = TypeVar("T")

# A fresh OpenEnv server admits this many sessions (OpenEnv's own default is 1): one per rollout in flight.
DEFAULT_MAX_CONCURRENT_ENVS = 64


class WorldState(State):
    """OpenEnv's `State` (episode_id, step_count) plus where the episode is in its world."""

    world: str | None = None  # the world's name (its YAML `name`)
    session_id: str | None = None  # the world session (its trajectory records carry it)
    seed: int | None = None  # the world's seed (sampling seeds derive from it and the call index)
    calls: int = 0  # tool calls in the world's trajectory, a fork's inherited ones included
    forked_from: str | None = None  # the episode this one was forked from


# --- the event loop every world runs on ---------------------------------------------------------------------------

_portal_lock = threading.Lock()
_portal: BlockingPortal | None = None


def _loop() -> BlockingPortal:
    """The portal into the worlds' event loop, started (a daemon thread) on first use."""
    global _portal
    with _portal_lock:
        if _portal is None:
            ready: queue.Queue[BlockingPortal | BaseException] = queue.Queue()

            async def serve() -> None:
                async with BlockingPortal() as portal:
                    ready.put(portal)
                    await portal.sleep_until_stopped()

            def run() -> None:
                try:
                    anyio.run(serve)
                except BaseException as exc:  # handed to the thread that waits for the loop
                    ready.put(exc)

            threading.Thread(target=run, name="aw-mcp-openenv-worlds", daemon=True).start()
            started = ready.get()
            if isinstance(started, BaseException):
                raise RuntimeError("the worlds' event loop did not start") from started
            _portal = started
            atexit.register(_shutdown)
        return _portal


async def _close_all_live() -> None:
    with _live_lock:
        environments = list({id(e): e for e in _live.values()}.values())
    with anyio.move_on_after(30):  # a backend that will not close must not hold the interpreter's exit
        for environment in environments:
            await environment._close()


def _shutdown() -> None:
    """At exit: close the episodes still open (trajectory files get their last records), then stop the loop."""
    global _portal
    with _portal_lock:
        portal, _portal = _portal, None
    if portal is None:
        return
    with contextlib.suppress(Exception):
        portal.call(_close_all_live)
        portal.call(portal.stop)


def _blocking(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return _loop().call(fn, *args)


async def _awaiting(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    future = _loop().start_task_soon(fn, *args)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): wait in a worker thread
        return await anyio.to_thread.run_sync(future.result)
    return await asyncio.wrap_future(future)  # cancelling the caller cancels the call in the worlds' loop


# Live episodes by episode id: what `reset(fork_from=...)` forks.
_live_lock = threading.Lock()
_live: dict[str, WorldEnvironment] = {}


def _check_options(world: str, options: dict[str, Any]) -> None:
    """Unknown backend options fail here, not at the first reset."""
    try:
        WorldOptions(world=world, **options)
    except TypeError as exc:
        raise TypeError(f"not an option of aw_mcp.Env.open / `aw-mcp serve`: {exc}") from None


# --- the environment ----------------------------------------------------------------------------------------------


class WorldEnvironment(Environment[Action, Observation, WorldState]):
    """One episode of a simulated world at a time, as an OpenEnv environment. `world` and the options are
    `aw_mcp.Env.open`'s (a bundled world's name or a YAML path; `backend="demo"`, `base_url=...`, `model=...`,
    `seed=...`, ...); every `reset()` opens a fresh session with them. Close with `close()`."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance has a world session of its own

    def __init__(
        self,
        world: str | Path,
        *,
        seed: int | None = None,
        transform: Any = None,
        rubric: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(transform=transform, rubric=rubric)
        self._world = str(world)
        self._seed = seed
        self._options = options
        _check_options(self._world, {"seed": seed, **options})
        self._env: Env | None = None
        self._closed = False
        self._state = WorldState()
        self._guard: anyio.Lock | None = None  # made in the worlds' loop

    # --- OpenEnv's interface ----------------------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        fork_from: str | None = None,
        **kwargs: Any,
    ) -> ListToolsObservation:
        """A fresh session of the world (its seed, or `seed`), or with `fork_from=EPISODE_ID` a copy of that live
        episode at its current point. The observation is the tool list; `metadata` says which world and session.
        Other keyword arguments (another environment's reset options) are ignored, as OpenEnv's server does."""
        self._reset_rubric()
        return self._apply_transform(_blocking(self._reset, seed, episode_id, fork_from))

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        fork_from: str | None = None,
        **kwargs: Any,
    ) -> ListToolsObservation:
        await self._reset_rubric_async()
        observation = self._apply_transform(await _awaiting(self._reset, seed, episode_id, fork_from))
        named = _websocket_session.get()
        if named is not None:  # a WebSocket that named the session of its client's HTTP /mcp calls
            with _live_lock:
                _linked[named] = self
        return observation

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """`ListToolsAction` or `CallToolAction` (a step before any reset resets first). `timeout_s` bounds a tool
        call; past it the observation's error is `timeout` and the call is recorded as cancelled."""
        observation = _blocking(self._step, action, timeout_s)
        if self.rubric is not None:
            observation.reward = self._apply_rubric(action, observation)
        return self._apply_transform(observation)

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        observation = await _awaiting(self._step, action, timeout_s)
        if self.rubric is not None:
            observation.reward = await self._apply_rubric_async(action, observation)
        return self._apply_transform(observation)

    @property
    def state(self) -> WorldState:
        return self._state.model_copy()

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=f"agentworld-mcp: {self._world}",
            description=(
                f"The simulated MCP tool world {self._world!r} (agentworld-mcp): list_tools / call_tool; "
                "reset(fork_from=EPISODE_ID) copies a live episode."
            ),
            version=__version__,
        )

    def close(self) -> None:
        """End the episode (its world session closes; the backend too once no other episode uses it). A closed
        environment takes no more actions."""
        self._closed = True
        if self._env is None:  # never reset (OpenEnv makes throwaway instances for /schema, /metadata, ...)
            self._forget()
            return
        with _portal_lock:
            running = _portal is not None
        if running:
            _blocking(self._close)

    @property
    def mcp_client(self) -> EpisodeTools:
        """What OpenEnv's server calls for MCP JSON-RPC on `/mcp` (tools/list, tools/call): this episode's tools.
        openenv 0.10's `MCPToolClient` lists and calls tools that way; openenv-core 0.3's server answers it only
        for an environment with an `mcp_client` ("Environment does not support MCP" otherwise)."""
        return EpisodeTools(self)

    # --- our extension ----------------------------------------------------------------------------------------------

    def fork(self, n: int) -> list[WorldEnvironment]:
        """`n` environments, each an independent copy of this episode at its current point (its world session,
        step count and calls); each has an episode id of its own and `forked_from` this one's. They carry no rubric
        or transform: give them theirs."""
        return _blocking(self._fork, n)

    async def fork_async(self, n: int) -> list[WorldEnvironment]:
        return await _awaiting(self._fork, n)

    @property
    def env(self) -> Env | None:
        """The world session behind the current episode (`aw_mcp.Env`: its trajectory, session, ...), or None
        before the first reset. Use it from the worlds' loop only (read-only from elsewhere)."""
        return self._env

    # --- in the worlds' loop ----------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        if self._guard is None:
            self._guard = anyio.Lock()
        async with self._guard:  # one action at a time per episode; a fork waits for a call in flight
            yield

    async def _reset(
        self, seed: int | None, episode_id: str | None, fork_from: str | None
    ) -> ListToolsObservation:
        self._check_open()
        if fork_from is not None:
            if seed is not None:
                raise ValueError("reset(fork_from=...) copies an episode, seed and all: give no seed")
            parent = _find_live(fork_from)
            [(env, inherited)] = await parent._copies(1, fork_from)
            state = WorldState(step_count=inherited.step_count, calls=inherited.calls, forked_from=fork_from)
        else:
            env = await Env.open(self._world, seed=self._seed if seed is None else seed, **self._options)
            state = WorldState()
        episode = episode_id or uuid.uuid4().hex
        try:
            await self._adopt(env, state, episode)
        except BaseException:
            await env.close()
            raise
        return ListToolsObservation(
            tools=_tools(env),
            metadata={
                "world": env.world.name,
                "episode_id": episode,
                "session_id": env.id,
                "seed": env.world.seed,
                "forked_from": fork_from,
            },
        )

    async def _adopt(self, env: Env, state: WorldState, episode_id: str) -> None:
        """Make `env` this environment's episode `episode_id` (closing the one before)."""
        state.episode_id = episode_id
        state.world = env.world.name
        state.session_id = env.id
        state.seed = env.world.seed
        async with self._locked():
            self._check_open()
            with _live_lock:
                holder = _live.get(episode_id)
                if holder is not None and holder is not self:
                    raise ValueError(f"episode id {episode_id!r} is in use by another live episode")
                previous = self._env
                if self._state.episode_id is not None:
                    _live.pop(self._state.episode_id, None)
                self._env, self._state = env, state
                _live[episode_id] = self
            if previous is not None:
                await previous.close()

    async def _copies(self, n: int, episode_id: str | None = None) -> list[tuple[Env, WorldState]]:
        """`n` forks of the current episode (`episode_id`'s, when given: it must still be this one's)."""
        async with self._locked():
            if self._env is None or (episode_id is not None and self._state.episode_id != episode_id):
                raise ValueError(f"episode {episode_id or self._state.episode_id!r} is not live any more")
            children = await self._env.fork(n)
            return [(child, self._state.model_copy()) for child in children]

    async def _fork(self, n: int) -> list[WorldEnvironment]:
        if self._env is None:
            raise RuntimeError("fork needs an episode: reset() first")
        parent_episode = self._state.episode_id
        forks = []
        for env, inherited in await self._copies(n):
            child = WorldEnvironment(self._world, seed=self._seed, **self._options)
            state = WorldState(
                step_count=inherited.step_count, calls=inherited.calls, forked_from=parent_episode
            )
            await child._adopt(env, state, uuid.uuid4().hex)
            forks.append(child)
        return forks

    async def _step(self, action: Action, timeout_s: float | None) -> Observation:
        if not isinstance(action, ListToolsAction | CallToolAction):
            raise ValueError(
                f"{type(action).__name__} is not an action of a world: send ListToolsAction or CallToolAction"
            )
        self._check_open()
        if self._env is None:
            await self._reset(None, None, None)
        async with self._locked():
            self._check_open()
            env = self._env
            assert env is not None
            if isinstance(action, ListToolsAction):
                observation: Observation = ListToolsObservation(tools=_tools(env))
            else:
                observation = await _call_tool(env, action, timeout_s)
            self._state.step_count += 1
            self._state.calls = len(env.trajectory)
        return observation

    async def _close(self) -> None:
        async with self._locked():
            env, self._env = self._env, None
            self._forget()
        if env is not None:
            await env.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this environment is closed")

    def _forget(self) -> None:
        with _live_lock:
            if self._state.episode_id is not None and _live.get(self._state.episode_id) is self:
                del _live[self._state.episode_id]


def _find_live(episode_id: str) -> WorldEnvironment:
    with _live_lock:
        environment = _live.get(episode_id)
    if environment is None:
        raise ValueError(
            f"no live episode {episode_id!r} to fork in this process (closed, reset, or never opened)"
        )
    return environment


class EpisodeTools:
    """An episode's tools in the shape OpenEnv's HTTP server drives an environment's `mcp_client` with (fastmcp's
    Client: `is_connected()`, `list_tools()`, `call_tool(name=, arguments=)`, `async with`). Each is a step of the
    episode, as ListToolsAction / CallToolAction over the WebSocket are; a call's result is the MCP result dict a
    CallToolObservation carries (`data` is what `MCPToolClient.call_tool` returns); an unknown tool, a
    protocol_error fault or a timeout is raised, which the server answers as a JSON-RPC error."""

    def __init__(self, environment: WorldEnvironment) -> None:
        self._own = environment

    @property
    def environment(self) -> WorldEnvironment:
        """This session's environment, or the episode its client's WebSocket reset (`SessionLink`)."""
        named = _mcp_session.get()
        with _live_lock:
            linked = _linked.get(named) if named is not None else None
        return linked if linked is not None and not linked._closed else self._own

    def is_connected(self) -> bool:
        return self.environment._env is not None  # a live episode: the server calls straight in

    async def __aenter__(self) -> EpisodeTools:
        return self  # a request without a session gets a fresh environment: its first step resets it

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def list_tools(self) -> list[Tool]:
        observation = await self.environment.step_async(ListToolsAction())
        assert isinstance(observation, ListToolsObservation)
        return observation.tools

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        observation = await self.environment.step_async(
            CallToolAction(tool_name=name, arguments=arguments or {})
        )
        assert isinstance(observation, CallToolObservation)
        if observation.error is not None:
            raise RuntimeError(f"{observation.error.error_type.value}: {observation.error.message}")
        return observation.result


def _tools(env: Env) -> list[Tool]:
    return [
        Tool(name=t.name, description=t.description or "", input_schema=dict(t.input_schema))
        for t in env.tools
    ]


def _result(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """A tool's MCP result as OpenEnv's MCPEnvironment puts it in a CallToolObservation (fastmcp's CallToolResult
    fields), `data` being the structured content or, when the tool gave none, its text."""
    text = "\n".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))
    structured = result.structured_content
    return {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
        ],
        "structured_content": structured,
        "is_error": result.is_error,
        "data": structured if structured is not None else text,
        "meta": result.meta,
    }


async def _call_tool(env: Env, action: CallToolAction, timeout_s: float | None) -> CallToolObservation:
    name = action.tool_name
    with anyio.move_on_after(timeout_s):
        try:
            result = await env.call(name, action.arguments)
        except MCPError as exc:  # where an MCP client gets a JSON-RPC error
            if name not in {t.name for t in env.tools}:
                kind = ToolErrorType.TOOL_NOT_FOUND
            elif exc.code == mcp_types.INVALID_PARAMS:
                kind = ToolErrorType.INVALID_ARGS
            else:  # a protocol_error fault: the transport failed, as far as the agent can tell
                kind = ToolErrorType.TRANSPORT_ERROR
            return CallToolObservation(
                tool_name=name,
                error=ToolError(error_type=kind, message=exc.message),
                metadata={"jsonrpc_code": exc.code},
            )
        return CallToolObservation(tool_name=name, result=_result(result))
    return CallToolObservation(
        tool_name=name,
        error=ToolError(error_type=ToolErrorType.TIMEOUT, message=f"{name} timed out after {timeout_s:g} s"),
    )


# --- OpenEnv's server -----------------------------------------------------------------------------------------------

# openenv 0.10's MCPToolClient makes one session over HTTP (`openenv/session/create`), then opens its WebSocket with
# `?session_id=` that id, so that reset/step/state there and list_tools/call_tool on /mcp are one episode; openenv-core
# 0.3's server gives the WebSocket a session of its own. SessionLink notes the id on both paths (contextvars of the
# request's task) and the episode the WebSocket reset answers that session's /mcp calls.
_websocket_session: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "openenv_ws_session", default=None
)
_mcp_session: contextvars.ContextVar[str | None] = contextvars.ContextVar("openenv_mcp_session", default=None)
_linked: dict[str, WorldEnvironment] = {}  # a client's session id -> the episode its WebSocket reset
MAX_MCP_BODY_BYTES = 1024 * 1024  # a larger /mcp request is passed on unread (no session link)


class SessionLink:
    """ASGI wrapper around OpenEnv's app: the session id a 0.10 client names on `/ws` and in `/mcp` requests
    (see above). Everything else passes through unchanged; attributes are the wrapped app's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket" and scope.get("path") == "/ws":
            query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
            named = (query.get("session_id") or [None])[0]
            token = _websocket_session.set(named)
            try:
                await self.app(scope, receive, send)
            finally:
                _websocket_session.reset(token)
                if named is not None:
                    with _live_lock:
                        _linked.pop(named, None)
            return
        if scope["type"] == "http" and scope.get("path") == "/mcp" and scope.get("method") == "POST":
            body, more, messages = b"", True, []
            while more and len(body) <= MAX_MCP_BODY_BYTES:
                message = await receive()
                messages.append(message)
                body += message.get("body", b"")
                more = message.get("more_body", False) and message["type"] == "http.request"

            async def replay() -> Any:
                return messages.pop(0) if messages else await receive()

            named = None
            if not more:
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    named = json.loads(body).get("params", {}).get("session_id")
            token = _mcp_session.set(named if isinstance(named, str) else None)
            try:
                await self.app(scope, replay, send)
            finally:
                _mcp_session.reset(token)
            return
        await self.app(scope, receive, send)


def create_app(
    world: str | Path,
    *,
    max_concurrent_envs: int = DEFAULT_MAX_CONCURRENT_ENVS,
    env_name: str | None = None,
    **options: Any,
) -> Any:
    """OpenEnv's FastAPI server app (`openenv.core.env_server.create_app`) for `world`, one `WorldEnvironment`
    per client session: `/ws` (reset / step / state), `/mcp` (tools/list, tools/call), `/reset`, `/step`,
    `/schema`, `/health`, ... Serve it with uvicorn. `options` are `WorldEnvironment`'s (`backend=`, `seed=`, ...)."""
    from openenv.core.env_server.http_server import create_app as openenv_create_app

    path = resolve_world_path(str(world))  # an unknown world fails now, not at the first reset
    _check_options(str(world), options)
    factory = functools.partial(WorldEnvironment, str(world), **options)
    extra: dict[str, Any] = {"state_cls": WorldState, "reset_observation_cls": ListToolsObservation}
    accepted = inspect.signature(openenv_create_app).parameters
    app = openenv_create_app(
        factory,
        CallToolAction,  # so OpenEnv routes list_tools / call_tool steps and /mcp's tools/* to step()
        CallToolObservation,
        env_name=env_name or path.stem,
        max_concurrent_envs=max_concurrent_envs,
        **{key: value for key, value in extra.items() if key in accepted},  # older OpenEnv lacks them
    )
    return SessionLink(app)


def main(argv: list[str] | None = None) -> None:
    """`python -m aw_mcp.integrations.openenv WORLD --backend demo --port 8000`: serve a world with OpenEnv's server."""
    parser = argparse.ArgumentParser(prog="python -m aw_mcp.integrations.openenv", description=main.__doc__)
    parser.add_argument("world", help="a bundled world's name or a world YAML file")
    parser.add_argument("--backend", help="as `aw-mcp serve --backend` (demo, local, openai, replay, ...)")
    parser.add_argument("--base-url", help="an OpenAI-compatible server's URL (.../v1)")
    parser.add_argument("--model", help="the model name or checkpoint")
    parser.add_argument("--seed", type=int, help="override the world's seed")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port_number, default=8000)
    parser.add_argument("--max-concurrent-envs", type=int, default=DEFAULT_MAX_CONCURRENT_ENVS)
    args = parser.parse_args(argv)
    import uvicorn

    options = {
        k: v for k, v in (("backend", args.backend), ("base_url", args.base_url), ("model", args.model))
    }
    app = create_app(args.world, seed=args.seed, max_concurrent_envs=args.max_concurrent_envs, **options)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
