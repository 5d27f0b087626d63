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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from aw_mcp import __version__
from aw_mcp.backends.base import BackendError
from aw_mcp.errors import ServeError
from aw_mcp.http_guard import BearerAuth, HttpOptions, ReleaseOnDelete, check_exposure, transport_security
from aw_mcp.scorecard import score
from aw_mcp.session import SessionKeyError, WorldSession
from aw_mcp.simulator import Simulator, UnknownToolError
from aw_mcp.stdio_guard import answer_malformed_lines
from aw_mcp.world import WorldSpec

log = logging.getLogger("aw_mcp.server")

SESSION_META_KEY = "aw/session"
SPEC_URI = "world://spec"
TRAJECTORY_URI = "world://trajectory"
FAULTS_URI = "world://faults"
SCORECARD_URI = "world://scorecard"


@dataclass
class WorldApp:
    """What the protocol handlers need: the simulator and the world file's text (served as a resource)."""

    simulator: Simulator
    spec_text: str

    @property
    def world(self) -> WorldSpec:
        return self.simulator.world


def session_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Transport session id (2025-era HTTP), else the client's `_meta["aw/session"]`, else the shared session."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is not None:
        sid = headers.get("mcp-session-id")
        if sid:
            return f"http-{sid}"
    meta = ctx.meta or {}
    value = meta.get(SESSION_META_KEY) if isinstance(meta, dict) else None
    return str(value) if value else None


def world_session(app: WorldApp, key: str | None) -> WorldSession:
    """The caller's world session; a refused key (too long, no room) is an invalid-params error, not a crash."""
    try:
        return app.simulator.registry.get(key)
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


class WorldServer(Server[Any]):
    """A world's tool list can change (catalog faults), on every transport: advertise `tools.listChanged` in
    every handshake, including the HTTP transport's, which asks for the capabilities without options."""

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


def build_server(app: WorldApp) -> Server[Any]:
    world = app.world
    # 2026-07-28 clients hear about tool-list changes on `subscriptions/listen` streams fed by this bus.
    bus = InMemorySubscriptionBus()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = app.simulator.catalog.tools  # catalog faults change it for the whole world
        # Recorded: whether the agent re-listed after a catalog change is part of its scorecard.
        await app.simulator.registry.note_listing(
            world_session(app, session_key(ctx)), [t.name for t in tools]
        )
        return types.ListToolsResult(tools=[types.Tool.model_validate(t.wire()) for t in tools])

    async def announce_tool_list_change(ctx: ServerRequestContext[Any, Any]) -> None:
        await bus.publish(ToolsListChanged())
        try:  # 2025-era connections: a notification on the caller's session
            await ctx.session.send_tool_list_changed()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # not available on this connection's era or transport
            log.debug("tools/list_changed not sent on this session: %s", exc)

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

        try:
            outcome = await app.simulator.call(params.name, params.arguments, session_key(ctx), report)
        except (UnknownToolError, SessionKeyError) as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        if outcome.catalog_changed:
            await announce_tool_list_change(ctx)
        if outcome.protocol_error is not None:
            code, message = outcome.protocol_error
            raise MCPError(code=code, message=message)
        content = [types.TextContent(type="text", text=outcome.text)]
        notice = outcome.record.notice if outcome.record is not None else None
        if notice:  # answers that are not the world model's say so in every result
            content.append(types.TextContent(type="text", text=f"[{notice}]"))
        result = types.CallToolResult(
            content=content,
            structured_content=outcome.structured if not outcome.is_error else None,
            is_error=outcome.is_error,
        )
        return result

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
        return types.ListResourcesResult(resources=resources)

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
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
        else:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Resource not found: {params.uri}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type=mime, text=text)]
        )

    return WorldServer(
        f"aw-mcp:{world.name}",
        version=__version__,
        title=f"AgentWorld: {world.name}",
        instructions=(world.description.strip() or None),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_subscriptions_listen=ListenHandler(bus),
    )


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

    async with anyio.create_task_group() as tg:
        tg.start_soon(preload)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await backend.aclose()


async def serve_stdio(app: WorldApp) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(app)
    async with backend_lifetime(app), stdio_server() as (read_stream, write_stream):
        async with answer_malformed_lines(read_stream, write_stream) as checked:
            await server.run(checked, write_stream, initialization_options(server))


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
    sessions freed on DELETE, and the bearer token checked first when one is set."""
    server = build_server(app)
    asgi: Any = server.streamable_http_app(host=options.host, transport_security=transport_security(options))
    registry = app.simulator.registry
    asgi = ReleaseOnDelete(asgi, lambda sid: registry.drop(f"http-{sid}"))
    if options.auth_token:
        asgi = BearerAuth(asgi, options.auth_token)
    return asgi


async def serve_http(
    app: WorldApp, options: HttpOptions | None = None, sock: socket.socket | None = None
) -> None:
    """Raises HttpExposureError before binding when the options would expose the world unprotected; binds the port
    (or takes `sock`, bound by the caller) before saying it serves there."""
    import uvicorn

    options = options or HttpOptions()
    warning = check_exposure(options)
    if warning:
        print(f"aw-mcp: {warning}", file=sys.stderr, flush=True)
    asgi = build_http_app(app, options)
    sock = sock or listen_socket(options.host, options.port)
    port = sock.getsockname()[1]
    config = uvicorn.Config(asgi, host=options.host, port=port, log_level="warning", lifespan="on")
    auth = " (bearer token required)" if options.auth_token else ""
    print(
        f"aw-mcp: serving {app.world.name} on http://{options.host}:{port}/mcp{auth}",
        file=sys.stderr,
        flush=True,
    )
    async with backend_lifetime(app):
        await uvicorn.Server(config).serve(sockets=[sock])
