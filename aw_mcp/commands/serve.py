"""`aw-mcp serve`: publish a world's tools over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import anyio

from aw_mcp.backends.preflight import preflight
from aw_mcp.commands import summary
from aw_mcp.core.flags import port_number
from aw_mcp.core.private_files import write_private_text
from aw_mcp.core.redaction import redact_url
from aw_mcp.core.settings import read_settings
from aw_mcp.eval.scorecard import score
from aw_mcp.protocol.http_guard import HttpOptions, check_exposure
from aw_mcp.protocol.server import WorldApp, listen_socket, serve_http, serve_stdio
from aw_mcp.sim.registry import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL_S, SessionRegistry
from aw_mcp.sim.world_setup import (
    add_backend_flags,
    add_preset_flag,
    add_world_flag,
    check_served_context,
    reproduce_flags,
    setup_world,
)
from aw_mcp.spec.bundled import looks_like_path

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report Ctrl-C


EPILOG = """\
examples:
  aw-mcp serve --world mcp_crm --backend demo
      try it without a model: answers are the world's own examples, labelled as such
  aw-mcp serve --world mcp_crm --base-url http://127.0.0.1:8000/v1 --record run.jsonl
      the world model on a vLLM/SGLang server; every call appended to run.jsonl
  aw-mcp serve --world ./my_world.yaml --backend demo --transport http --port 8765
      a world file of your own, over streamable HTTP at http://127.0.0.1:8765/mcp
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help=summary("serve"),
        description="Serve a world's tools as an MCP server; a world model answers every call.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_world_flag(parser)
    add_backend_flags(parser)
    add_preset_flag(parser)
    add_transport_flags(parser)
    add_preflight_flag(parser)
    parser.set_defaults(func=run)


def add_preflight_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="do not check the backend before serving (for a model server that starts after this one)",
    )


def add_transport_flags(parser: argparse.ArgumentParser) -> None:
    """How the server is reached and bounded (serve and mirror): stdio or HTTP, HTTP safety, sessions, scorecard."""
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default): an MCP client starts this command and talks over stdin/stdout; http: streamable "
        "HTTP at http://HOST:PORT/mcp for clients that connect to a URL",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=8765, help="HTTP port, 1-65535 (default 8765)")
    parser.add_argument(
        "--scorecard",
        metavar="PATH",
        help="when the server stops, write the robustness scorecard of everything served as JSON to PATH",
    )
    http = parser.add_argument_group("HTTP safety and limits")
    http.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help="HTTP clients must send `Authorization: Bearer TOKEN` (AW_AUTH_TOKEN); required off loopback",
    )
    http.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve on a non-loopback --host without a token (anyone who can reach the port can use the world)",
    )
    http.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="a Host (and Origin) clients may use besides loopback, e.g. the machine's address; repeatable",
    )
    http.add_argument(
        "--session-ttl",
        type=float,
        default=DEFAULT_SESSION_TTL_S,
        metavar="SECONDS",
        help=f"free a world session idle this long (default {DEFAULT_SESSION_TTL_S:.0f})",
    )
    http.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        help=f"live world sessions at most; the least recently used idle one makes room (default {DEFAULT_MAX_SESSIONS})",
    )


def terminal_hint(world: str, flags: Sequence[str] | None = None) -> str:
    """One line for a person who started the server at a terminal: this is not a prompt, and how to connect.
    `flags` (world_setup.reproduce_flags) are the options that make the same server, repeated in both suggestions
    so they work as printed (`--backend demo` above all: without it a base install has no model to use)."""
    flags = list(flags) if flags is not None else ["--world", world]
    name = Path(world).stem if looks_like_path(world) else world
    entry = json.dumps({"command": "aw-mcp", "args": ["serve", *flags]})
    return (
        f"aw-mcp: serving world {world!r} as an MCP server on stdin/stdout; a terminal is not an MCP client. "
        f"Connect an agent with an mcpServers entry such as {{{json.dumps(name)}: {entry}}}, try the tools by hand "
        f"with `{shlex.join(['aw-mcp', 'shell', *flags])}`, or press Ctrl-C to quit."
    )


# Work that must happen however the server stops (the scorecard), run once.
_on_stop: list[Callable[[], None]] = []


def run_stop_hooks() -> None:
    while _on_stop:
        _on_stop.pop()()


def exit_on_interrupt(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C at a terminal ends the server at once. The stdio transport reads stdin in a worker thread that no
    cancellation reaches, so a graceful shutdown would wait for a line that never comes. Trajectories are flushed
    per call, so nothing recorded is lost."""
    sys.stderr.write("\n")
    sys.stderr.flush()
    run_stop_hooks()
    os._exit(INTERRUPTED_EXIT)


def exit_on_terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (how clients and supervisors stop a server): run the stop hooks, then exit 128 + 15."""
    run_stop_hooks()
    os._exit(128 + signal.SIGTERM)


def scorecard_writer(registry: SessionRegistry, path: Path, label: str) -> Callable[[], None]:
    """Keep every line served; at the end, score them and write the JSON (what `aw-mcp report --json` prints)."""
    registry.journal = []
    journal = registry.journal

    def write() -> None:
        card = score([(label, list(journal))])
        write_private_text(path, card.model_dump_json(indent=2) + "\n")  # it quotes calls: owner-only
        print(
            f"aw-mcp: scorecard of {len(card.reactions)} graded reaction(s) written to {path}",
            file=sys.stderr,
            flush=True,
        )

    return write


def http_options(args: argparse.Namespace) -> HttpOptions:
    """The HTTP options of the command line, refused now (before anything loads) if they expose the server."""
    options = HttpOptions(
        host=args.host,
        port=args.port,
        auth_token=args.auth_token or read_settings().auth_token_value,
        allow_unauthenticated=args.allow_unauthenticated,
        allowed_hosts=args.allowed_host,
    )
    if args.transport == "http":
        check_exposure(options)
    return options


def bound_sessions(registry: SessionRegistry, args: argparse.Namespace) -> None:
    registry.idle_ttl_s = args.session_ttl if args.session_ttl > 0 else None
    registry.max_sessions = max(1, args.max_sessions)


def run(args: argparse.Namespace) -> int:
    options = http_options(args)
    setup = setup_world(args)
    registry = setup.simulator.registry
    bound_sessions(registry, args)
    if args.preflight and not (args.cache and args.cache_mode == "replay-only"):  # no model to reach
        # AW_API_KEY goes where calls send it: to a world file's own URL only with --trust-world-backend.
        context = preflight(setup.backend, getattr(args, "trust_world_backend", False))
        if context is not None and setup.backend.base_url is not None:
            check_served_context(setup.world, context, redact_url(setup.backend.base_url))
    app = WorldApp(setup.simulator, setup.spec_text)
    if args.scorecard:
        label = args.record or args.resume or f"aw-mcp serve --world {args.world}"
        _on_stop.append(scorecard_writer(registry, Path(args.scorecard), label))
        signal.signal(signal.SIGTERM, exit_on_terminate)  # a client or supervisor stopping us still gets it
    try:
        if args.transport == "http":
            sock = listen_socket(options.host, options.port)
            anyio.run(serve_http, app, options, sock)
            return 0
        if sys.stdin.isatty():
            signal.signal(signal.SIGINT, exit_on_interrupt)  # first: once the hint is out, Ctrl-C is handled
            print(terminal_hint(args.world, reproduce_flags(args)), file=sys.stderr, flush=True)
        anyio.run(serve_stdio, app)
        return 0
    finally:
        run_stop_hooks()
