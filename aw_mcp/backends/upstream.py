"""A real MCP server as the answer source (`aw-mcp mirror`): one client connection to it, held open by a task of its
own and opened again after it dies.

The connection is a stdio child (`mirror -- CMD ARGS...`) or a Streamable HTTP endpoint (`--upstream-url`, headers
and bearer token sent on every request). Every request has a deadline; an upstream that exits, hangs or writes
something that is not JSON-RPC fails that request with an `UpstreamError` within it, never a hang, and the next
request starts a fresh connection. A JSON-RPC error the upstream answers with is its answer (`UpstreamRefusal`),
forwarded as it is.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

import anyio
import mcp.types as types
from mcp import ClientSession, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client

from aw_mcp.core.redaction import register_secret
from aw_mcp.core.settings import child_environment

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0
MAX_PAGES = 1000  # a server that keeps handing out cursors is broken; stop rather than loop forever

T = TypeVar("T")


class UpstreamError(Exception):
    """The upstream gave no answer: it could not be started or reached, it exited, hung past the deadline or wrote
    something that is not MCP."""


class UpstreamRefusal(Exception):
    """The upstream answered with a JSON-RPC error (an unknown tool, bad params): forwarded to the agent as is."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class UpstreamTarget:
    """Where the upstream is: a command line to start (stdio), or a URL with the headers every request carries."""

    command: tuple[str, ...] = ()
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError("an upstream is either a command line or a URL")
        for name, value in self.headers.items():  # a token sent upstream never reaches a trajectory or a log
            if name.lower() == "authorization" and " " in value:
                register_secret(value.split(" ", 1)[1])
            register_secret(value)

    def describe(self) -> str:
        return " ".join(self.command) if self.command else str(self.url)


@dataclass
class Surface:
    """What the upstream offers, as its handshake and its lists said at the start."""

    tools: list[types.Tool]
    resources: list[types.Resource]
    resource_templates: list[types.ResourceTemplate]
    prompts: list[types.Prompt]
    server_name: str | None = None
    server_version: str | None = None
    instructions: str | None = None


@dataclass
class Passthrough:
    """What a mirror serves of the upstream besides its tools: its resources and prompts (as listed at the start),
    requests for them forwarded to `upstream`."""

    surface: Surface
    upstream: Upstream


class Upstream:
    """One live connection to the upstream (`async with Upstream(target) as upstream:`); every method raises
    UpstreamError or UpstreamRefusal, each within `call_timeout_s`."""

    def __init__(
        self,
        target: UpstreamTarget,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        errlog: TextIO | None = None,
    ):
        self.target = target
        self.call_timeout_s = call_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.errlog = errlog or sys.stderr  # the child's stderr: where its own messages belong
        self.initialize_result: types.InitializeResult | None = None
        self._session: ClientSession | None = None
        self._stop: anyio.Event | None = None  # set: the current connection's holder closes it
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Upstream:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()  # each holder closes its connection (and ends its child) on the way out
        await self._tg.__aexit__(None, None, None)

    # -- the connection ------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        if self.target.command:
            command, *args = self.target.command
            # The child gets this process's environment, as if the user had started it (the SDK's default keeps
            # only a few variables, which loses a server's own settings such as MEMORY_FILE_PATH).
            env = self.target.env if self.target.env is not None else child_environment()
            params = StdioServerParameters(command=command, args=args, env=env)
            async with stdio_client(params, errlog=self.errlog) as streams:
                yield streams
            return
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        timeout = httpx2.Timeout(self.call_timeout_s, read=self.call_timeout_s + 5)
        async with (
            httpx2.AsyncClient(headers=self.target.headers, timeout=timeout, follow_redirects=True) as http,
            streamable_http_client(str(self.target.url), http_client=http) as streams,
        ):
            yield streams[0], streams[1]

    async def _hold(self, stop: anyio.Event, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Open one connection, hand its session over, keep it until `stop` (or the server's end)."""
        try:
            async with self._transport() as (read, write), ClientSession(read, write) as session:
                with anyio.fail_after(self.connect_timeout_s):
                    self.initialize_result = await session.initialize()
                task_status.started(session)
                await stop.wait()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:  # a child that died, a refused connection: said once; calls report it
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            log.info("upstream connection to %s closed: %s", self.target.describe(), _leaf(exc))
            if not stop.is_set():
                stop.set()
                task_status.started(exc)

    async def _connected(self) -> ClientSession:
        async with self._lock:
            if self._session is not None and self._stop is not None and not self._stop.is_set():
                return self._session
            assert self._tg is not None, "use `async with Upstream(...)`"
            stop = anyio.Event()
            try:
                with anyio.fail_after(self.connect_timeout_s + 1):
                    got = await self._tg.start(self._hold, stop)
            except TimeoutError:
                stop.set()
                raise UpstreamError(
                    f"the upstream {self.target.describe()} did not complete the MCP handshake within "
                    f"{self.connect_timeout_s:g} s"
                ) from None
            if not isinstance(got, ClientSession):
                leaf = _leaf(got) if isinstance(got, BaseException) else got
                raise UpstreamError(
                    f"could not connect to the upstream {self.target.describe()}: {type(leaf).__name__}: {leaf}"
                )
            self._session, self._stop = got, stop
            return got

    def _drop(self, session: ClientSession) -> None:
        """A connection that failed a request is closed; the next request opens a new one."""
        if self._session is session and self._stop is not None:
            self._stop.set()
            self._session = None

    async def request(self, what: str, send: Callable[[ClientSession], Awaitable[T]]) -> T:
        """`send(session)` within the deadline: its result, or UpstreamRefusal / UpstreamError."""
        session: ClientSession | None = None
        with anyio.move_on_after(self.call_timeout_s) as deadline:
            session = await self._connected()
            try:
                return await send(session)
            except MCPError as exc:
                if (
                    exc.error.code == -32001 or "closed" in exc.error.message.lower()
                ):  # the SDK's own: no answer
                    self._drop(session)
                    raise UpstreamError(
                        f"the upstream gave no answer to {what}: {exc.error.message}"
                    ) from None
                raise UpstreamRefusal(exc.error.code, exc.error.message) from None
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                self._drop(session)
                leaf = _leaf(exc)
                raise UpstreamError(f"the upstream failed {what}: {type(leaf).__name__}: {leaf}") from None
        assert deadline.cancelled_caught
        if (
            session is not None
        ):  # a server stuck on one request is stuck for all (a stdio child reads in order):
            self._drop(session)  # the next request starts it again
        raise UpstreamError(
            f"the upstream {self.target.describe()} did not answer {what} within {self.call_timeout_s:g} s"
        )

    # -- what the mirror asks ------------------------------------------------------------------------------------

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        async def send(session: ClientSession) -> types.CallToolResult:
            result = await session.call_tool(name, arguments, read_timeout_seconds=self.call_timeout_s)
            if not isinstance(result, types.CallToolResult):
                raise UpstreamError(f"tools/call answered with {type(result).__name__}, not a tool result")
            return result

        return await self.request(f"tools/call {name}", send)

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        return await self.request(f"resources/read {uri}", lambda s: s.read_resource(uri))

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        return await self.request(f"prompts/get {name}", lambda s: s.get_prompt(name, arguments))

    async def surface(self) -> Surface:
        """The upstream's tools, resources, resource templates and prompts (those its capabilities offer)."""
        tools = await self._pages("tools/list", lambda s, c: s.list_tools(params=_page(c)), "tools")
        capabilities = self.initialize_result.capabilities if self.initialize_result else None
        resources: list[Any] = []
        templates: list[Any] = []
        prompts: list[Any] = []
        if capabilities is not None and capabilities.resources is not None:
            resources = await self._pages(
                "resources/list", lambda s, c: s.list_resources(params=_page(c)), "resources"
            )
            templates = await self._pages(
                "resources/templates/list",
                lambda s, c: s.list_resource_templates(params=_page(c)),
                "resource_templates",
            )
        if capabilities is not None and capabilities.prompts is not None:
            prompts = await self._pages(
                "prompts/list", lambda s, c: s.list_prompts(params=_page(c)), "prompts"
            )
        info = self.initialize_result.server_info if self.initialize_result else None
        return Surface(
            tools=tools,
            resources=resources,
            resource_templates=templates,
            prompts=prompts,
            server_name=getattr(info, "name", None),
            server_version=getattr(info, "version", None),
            instructions=self.initialize_result.instructions if self.initialize_result else None,
        )

    async def _pages(
        self, what: str, page: Callable[[ClientSession, str | None], Awaitable[Any]], key: str
    ) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            answer = await self.request(what, lambda s, c=cursor: page(s, c))
            items += getattr(answer, key)
            cursor = answer.next_cursor
            if not cursor:
                return items
        raise UpstreamError(f"{what} did not end after {MAX_PAGES} pages")


def _page(cursor: str | None) -> types.PaginatedRequestParams | None:
    return types.PaginatedRequestParams(cursor=cursor) if cursor else None


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def result_text(result: types.CallToolResult) -> str:
    """The observation a trajectory keeps of an upstream result: its text blocks, one a line; any other block as
    its JSON (an image's bytes left out)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            shown = block.model_dump(by_alias=True, exclude_none=True, mode="json")
            if "data" in shown:
                shown["data"] = f"<{len(shown['data'])} base64 characters>"
            parts.append(_json(shown))
    if not parts and result.structured_content is not None:
        parts.append(_json(result.structured_content))
    return "\n".join(parts)


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)
