"""The MCP face of a world: tools/list from the spec, tools/call through the simulator, world resources.

Built on the low-level `mcp.server.Server` of mcp 2.x, which serves both protocol eras (2025-11-25 handshake and the
stateless 2026-07-28 revision) on stdio and streamable HTTP from the same object.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import sys
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import ListenHandler, ResourceUpdated, ServerEvent, ToolsListChanged
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from aw_mcp.backends.upstream import Passthrough, UpstreamError, UpstreamRefusal
from aw_mcp.core.errors import ServeError
from aw_mcp.core.model_io import BackendError
from aw_mcp.core.redaction import register_secret
from aw_mcp.core.version import __version__
from aw_mcp.eval.scorecard import score
from aw_mcp.protocol.fork_route import ForkRoute
from aw_mcp.protocol.host_check import CheckHostAndOrigin, sdk_settings
from aw_mcp.protocol.http_guard import (
    BearerAuth,
    CheckJsonRpcBodies,
    HttpOptions,
    ReleaseOnDelete,
    check_exposure,
    host_policy,
)
from aw_mcp.protocol.jsonrpc_checks import checked_stdio_server
from aw_mcp.sim.registry import TRANSPORT_SESSION_PREFIX
from aw_mcp.sim.session import SessionKeyError, WorldSession
from aw_mcp.sim.simulator import Simulator, UnknownToolError
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import CallRecord

log = logging.getLogger("aw_mcp.protocol.server")
T = TypeVar("T")

SESSION_META_KEY = "aw/session"
# World sessions of 2025-era HTTP transport sessions are `http-<Mcp-Session-Id>`; no `aw/session` key is.
NOTIFY_WAIT_S = 5.0  # the longest one other connection's full stream may hold up a call that notifies it
SPEC_URI = "world://spec"
TRAJECTORY_URI = "world://trajectory"
FAULTS_URI = "world://faults"
SCORECARD_URI = "world://scorecard"


@dataclass
class WorldApp:
    """What the protocol handlers need: the simulator and the world file's text (served as a resource)."""

    simulator: Simulator
    spec_text: str
    # aw-mcp mirror: the upstream's resources and prompts, listed beside the world's and forwarded to it
    passthrough: Passthrough | None = None

    @property
    def world(self) -> WorldSpec:
        return self.simulator.world


def session_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The caller's world session: its HTTP transport session (2025 era), else the client's
    `_meta["aw/session"]`, else None (the shared session).

    Two key spaces that never meet: transport sessions are `http-<Mcp-Session-Id>`, and only a 2025-era request
    reaches one (a 2026-07-28 request is stateless: any `Mcp-Session-Id` header it carries is ignored); an
    `aw/session` key beginning with `http-` is refused, so no stateless request can name a transport session."""
    headers = getattr(ctx.request, "headers", None)
    if headers is not None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        sid = headers.get("mcp-session-id")
        if sid:
            return f"{TRANSPORT_SESSION_PREFIX}{sid}"
    meta = ctx.meta or {}
    value = meta.get(SESSION_META_KEY) if isinstance(meta, dict) else None
    if not value:
        return None
    key = str(value)
    if key.startswith(TRANSPORT_SESSION_PREFIX):
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f'_meta["{SESSION_META_KEY}"] may not begin with "{TRANSPORT_SESSION_PREFIX}": '
            "those keys are the world sessions of HTTP transport sessions",
        )
    return key


def world_session(app: WorldApp, key: str | None) -> WorldSession:
    """The caller's world session, for a read or a listing (an evicted session's notice is left for its next
    call); a refused key (too long, no room, evicted) is an invalid-params error, not a crash."""
    try:
        return app.simulator.registry.get(key, consume_notice=False)
    except SessionKeyError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None


def faults_document(app: WorldApp, session_key_: str | None) -> dict[str, Any]:
    """Every perturbation that fired in this session, call by call (the `world://faults` resource)."""
    session = world_session(app, session_key_)
    fired = [
        {"index": r.index, "tool": r.tool, "arguments": r.arguments, "time": r.time, **fault.to_json()}
        for r in sorted(session.records, key=lambda r: r.index)
        for fault in r.faults
    ]
    return {
        "world": app.world.name,
        "session": session.id,
        "seed": app.world.seed,
        "perturbations": [p.name for p in app.simulator.perturbations],
        "faults": fired,
    }


class SessionEvents:
    """The `subscriptions/listen` bus (2026-07-28), with each listener tied to a world session: resource updates
    of a session's trajectory, faults and scorecard reach the listen streams of that session (the one a listen
    request's `_meta["aw/session"]` names, as for a read), and the streams that name none unless the session is a
    transport session (a stateless client cannot read those); tool-list changes reach every stream.

    `view(session)` is what one `ListenHandler` subscribes through (mcp's `SubscriptionBus` protocol)."""

    def __init__(self, max_listeners: int = 1024) -> None:
        self.max_listeners = max_listeners
        self._listeners: dict[object, tuple[str | None, Callable[[ServerEvent], None]]] = {}

    def __len__(self) -> int:
        return len(self._listeners)

    def view(self, session: str | None) -> _SessionView:
        return _SessionView(self, session)

    def subscribe(self, session: str | None, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        token = object()
        self._listeners[token] = (session, listener)

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe

    async def publish(self, event: ServerEvent, session: str | None = None) -> None:
        """To every listener (`session` None: a world-wide event), or to those of `session`."""
        for listening, listener in list(self._listeners.values()):
            if session is not None and listening != session:
                if listening is not None or session.startswith(TRANSPORT_SESSION_PREFIX):
                    continue
            try:
                listener(event)
            except Exception:  # one broken listener must not starve the others or fail the call
                log.exception("subscription listener raised")
        await anyio.lowlevel.checkpoint()


class _SessionView:
    def __init__(self, events: SessionEvents, session: str | None) -> None:
        self.events = events
        self.session = session

    async def publish(self, event: ServerEvent) -> None:
        await self.events.publish(event, self.session)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        return self.events.subscribe(self.session, listener)


class ListChangeNotifier:
    """The 2025-era HTTP transport sessions that can hear `notifications/tools/list_changed` on their GET stream.

    A catalog change applies to the whole world, so every such session is told, not only the caller's. Each is
    remembered by its transport key from its latest request (the SDK builds a `ServerSession` per message; its
    standalone channel is the connection's), at most `limit` of them, forgotten on DELETE or when its world
    session is gone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._sessions: OrderedDict[str, ServerSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def note(self, ctx: ServerRequestContext[Any, Any], key: str | None) -> None:
        if key is None or not key.startswith(TRANSPORT_SESSION_PREFIX):
            return  # stdio (one connection: the caller) and stateless requests (listen streams instead)
        self._sessions[key] = ctx.session
        self._sessions.move_to_end(key)
        while len(self._sessions) > self.limit:
            self._sessions.popitem(last=False)

    def forget(self, key: str) -> None:
        self._sessions.pop(key, None)

    async def tool_list_changed(self, caller: ServerSession, live: set[str]) -> None:
        """Tell the caller's connection and every remembered one whose world session is live; a connection that
        cannot take it within NOTIFY_WAIT_S is skipped."""
        for key in [k for k in self._sessions if k not in live]:
            del self._sessions[key]
        targets = [caller, *(s for s in self._sessions.values() if s is not caller)]

        async def tell(session: ServerSession) -> None:
            with anyio.move_on_after(NOTIFY_WAIT_S):
                try:
                    await session.send_tool_list_changed()
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as exc:  # a closed connection, or one of the 2026 era (listen streams)
                    log.debug("tools/list_changed not sent on a session: %s", exc)

        async with anyio.create_task_group() as tg:
            for session in targets:
                tg.start_soon(tell, session)


class WorldServer(Server[Any]):
    """A world's tool list can change (catalog faults), on every transport: advertise `tools.listChanged` in
    every handshake, including the HTTP transport's, which asks for the capabilities without options.

    What keeps the advertised capabilities true: `notifier` tells every 2025-era HTTP session about a tool-list
    change, `events` carries tool-list changes and resource updates to 2026-07-28 listen streams."""

    notifier: ListChangeNotifier
    events: SessionEvents

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        options = notification_options or NotificationOptions()
        options.tools_changed = True
        return super().get_capabilities(
            options, experimental_capabilities, extensions, protocol_version=protocol_version
        )


def build_server(app: WorldApp) -> WorldServer:
    world = app.world
    registry = app.simulator.registry
    # 2026-07-28 clients hear about changes on `subscriptions/listen` streams fed from here; 2025-era HTTP
    # sessions through their GET streams.
    events = SessionEvents()
    notifier = ListChangeNotifier(limit=registry.max_sessions)

    async def resources_changed(key: str | None, records: list[Any]) -> None:
        """The session's resources that `records` (just committed) changed, to its listen streams."""
        session = key or registry.default_key
        if records:
            await events.publish(ResourceUpdated(TRAJECTORY_URI), session)
        if any(r.faults for r in records):
            await events.publish(ResourceUpdated(FAULTS_URI), session)
        await events.publish(ResourceUpdated(SCORECARD_URI), session)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = app.simulator.catalog.tools  # catalog faults change it for the whole world
        key = session_key(ctx)
        notifier.note(ctx, key)
        # Recorded: whether the agent re-listed after a catalog change is part of its scorecard. An evicted
        # session's history is gone: its listing is not recorded, and its next call is told why.
        if not registry.evicted(key):
            await registry.note_listing(
                world_session(app, key), [t.name for t in tools], [t.wire() for t in tools]
            )
        await resources_changed(key, [])
        return types.ListToolsResult(tools=[types.Tool.model_validate(t.wire()) for t in tools])

    async def announce_tool_list_change(ctx: ServerRequestContext[Any, Any]) -> None:
        """A catalog change is the whole world's: every listen stream and every 2025-era session hears it."""
        await events.publish(ToolsListChanged())
        await notifier.tool_list_changed(ctx.session, {s.id for s in registry.sessions()})

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async def report(progress: float, message: str) -> None:
            try:
                await ctx.session.report_progress(progress, None, message)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:  # a closed stream must not fail the call
                log.debug("progress not delivered: %s", exc)

        key = session_key(ctx)
        notifier.note(ctx, key)

        async def committed(record: CallRecord) -> None:  # a refused or cancelled call is recorded too
            await resources_changed(key, [record])

        try:
            outcome = await app.simulator.call(
                params.name, params.arguments, key, report, on_commit=committed
            )
        except (UnknownToolError, SessionKeyError) as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        if outcome.catalog_changed:
            await announce_tool_list_change(ctx)
        if outcome.protocol_error is not None:
            code, message = outcome.protocol_error
            raise MCPError(code=code, message=message)
        return outcome.result()

    async def listen(
        ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """`subscriptions/listen`, tied to the world session the request names (as a read is)."""
        key = session_key(ctx)
        if len(events) >= events.max_listeners:
            raise MCPError(code=types.INTERNAL_ERROR, message="Subscription limit reached")
        return await ListenHandler(events.view(key))(ctx, params)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        listed = [
            (SPEC_URI, "world-spec", f"World spec: {world.name}", "The YAML world this server simulates.",
             "application/yaml"),
            (TRAJECTORY_URI, "trajectory", "This session's trajectory",
             "Every call of this session so far, one JSON object per line.", "application/jsonl"),
        ]  # fmt: skip
        if app.simulator.perturbations:  # readable in every world; listed where faults can fire
            listed += [
                (FAULTS_URI, "faults", "Faults fired in this session",
                 "Every perturbation that fired, with its call, parameters and ground truth.", "application/json"),
                (SCORECARD_URI, "scorecard", "Robustness scorecard of this session",
                 "What the agent did about each fault so far (the JSON of `aw-mcp report --json`).",
                 "application/json"),
            ]  # fmt: skip
        resources = [
            types.Resource(uri=uri, name=name, title=title, description=description, mime_type=mime)
            for uri, name, title, description, mime in listed
        ]
        if app.passthrough is not None:
            resources += app.passthrough.surface.resources
        return types.ListResourcesResult(resources=resources)

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """A world's resources have fixed URIs (world://spec, ...): no templates. Answered all the same, since
        `resources` is advertised and clients ask (llama-index's include_resources, the Inspector)."""
        templates = app.passthrough.surface.resource_templates if app.passthrough is not None else []
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        notifier.note(ctx, session_key(ctx))
        if params.uri == SPEC_URI:
            text, mime = app.spec_text, "application/yaml"
        elif params.uri == TRAJECTORY_URI:
            session = world_session(app, session_key(ctx))
            text = "".join(r.to_line() + "\n" for r in session.records)
            mime = "application/jsonl"
        elif params.uri == FAULTS_URI:
            document = faults_document(app, session_key(ctx))
            text, mime = json.dumps(document, ensure_ascii=False, indent=2, default=str), "application/json"
        elif params.uri == SCORECARD_URI:
            session = world_session(app, session_key(ctx))
            card = score([(f"{app.world.name}/{session.id}", [*session.records, *session.listings])])
            text, mime = card.model_dump_json(indent=2), "application/json"
        elif app.passthrough is not None:
            return await forwarded(app.passthrough.upstream.read_resource(str(params.uri)))
        else:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Resource not found: {params.uri}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type=mime, text=text)]
        )

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=app.passthrough.surface.prompts if app.passthrough else [])

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if app.passthrough is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Prompt not found: {params.name}")
        return await forwarded(app.passthrough.upstream.get_prompt(params.name, params.arguments))

    prompts = app.passthrough is not None and bool(app.passthrough.surface.prompts)
    server = WorldServer(
        f"aw-mcp:{world.name}",
        version=__version__,
        title=f"AgentWorld: {world.name}",
        instructions=(world.description.strip() or None),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_subscriptions_listen=listen,
        on_list_prompts=list_prompts if prompts else None,
        on_get_prompt=get_prompt if prompts else None,
    )
    server.notifier = notifier
    server.events = events
    return server


async def forwarded(request: Awaitable[T]) -> T:
    """An upstream's answer to a request the mirror passes through; its JSON-RPC error as it gave it, no answer as
    an internal error saying why."""
    try:
        return await request
    except UpstreamRefusal as exc:
        raise MCPError(code=exc.code, message=exc.message) from None
    except UpstreamError as exc:
        raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None


def initialization_options(server: Server[Any]) -> Any:
    return server.create_initialization_options(NotificationOptions(tools_changed=True))


@asynccontextmanager
async def backend_lifetime(app: WorldApp) -> AsyncIterator[None]:
    """Start loading the model at once (a local engine takes minutes) while serving; close it at the end."""
    backend = app.simulator.backend

    async def preload() -> None:
        try:
            if await backend.preload():
                print(f"aw-mcp: {backend.name} model loaded", file=sys.stderr, flush=True)
        except BackendError as exc:  # calls will report it too; say it now, where the operator looks
            print(f"aw-mcp: {exc}", file=sys.stderr, flush=True)
        except Exception:  # a backend bug: said once here; it must not cancel the server (calls would hang)
            log.exception("the %s model failed to load", backend.name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(preload)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await backend.aclose()


async def serve_stdio(app: WorldApp) -> None:
    server = build_server(app)
    async with backend_lifetime(app), checked_stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, initialization_options(server))


def listen_socket(host: str, port: int) -> socket.socket:
    """Bind the HTTP port before saying we serve on it; a taken port is a one-line error, not a traceback."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ServeError(f"cannot listen on {host}:{port}: unknown host ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        hint = (
            " (another server holds it: stop it or pick another --port)"
            if exc.errno == errno.EADDRINUSE
            else ""
        )
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from None
    sock.set_inheritable(True)
    return sock


def build_http_app(app: WorldApp, options: HttpOptions) -> Any:
    """The ASGI app: the SDK's streamable HTTP endpoint with Host/Origin checks on every bind address, world
    sessions freed on DELETE, each POST body checked before the SDK reads it (a malformed one is answered with
    its JSON-RPC error), and the bearer token checked first when one is set."""
    server = build_server(app)
    security = sdk_settings()  # the SDK checks Content-Type; Host/Origin are checked in front (host_check.py)
    asgi: Any = server.streamable_http_app(host=options.host, transport_security=security)
    registry = app.simulator.registry

    def release(sid: str) -> None:
        registry.drop(f"{TRANSPORT_SESSION_PREFIX}{sid}")
        server.notifier.forget(f"{TRANSPORT_SESSION_PREFIX}{sid}")

    asgi = ReleaseOnDelete(asgi, release)
    asgi = CheckJsonRpcBodies(asgi, security)
    asgi = ForkRoute(asgi, app.simulator, security)
    asgi = CheckHostAndOrigin(asgi, host_policy(options))
    if options.auth_token:
        register_secret(options.auth_token)  # a server-side echo of it is redacted like the model's key
        asgi = BearerAuth(asgi, options.auth_token)
    return asgi


async def serve_http(
    app: WorldApp, options: HttpOptions | None = None, sock: socket.socket | None = None
) -> None:
    """Raises HttpExposureError before binding when the options would expose the world unprotected; binds the port
    (or takes `sock`, bound by the caller) before saying it serves there."""
    import uvicorn

    from aw_mcp.protocol.http_timeouts import server_config  # uvicorn is imported only to serve HTTP

    options = options or HttpOptions()
    warning = check_exposure(options)
    if warning:
        print(f"aw-mcp: {warning}", file=sys.stderr, flush=True)
    asgi = build_http_app(app, options)
    sock = sock or listen_socket(options.host, options.port)
    port = sock.getsockname()[1]
    config = server_config(asgi, options.host, port, lifespan="on")  # request-read and keep-alive timeouts
    auth = " (bearer token required)" if options.auth_token else ""
    print(
        f"aw-mcp: serving {app.world.name} on http://{options.host}:{port}/mcp{auth}",
        file=sys.stderr,
        flush=True,
    )
    async with backend_lifetime(app):
        await uvicorn.Server(config).serve(sockets=[sock])
