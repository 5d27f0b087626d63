"""`aw-mcp serve`: publish a world's tools over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from types import FrameType

import anyio

from aw_mcp.commands.world_setup import add_backend_flags, add_preset_flag, add_world_flag, setup_world
from aw_mcp.preflight import preflight
from aw_mcp.server import WorldApp, listen_socket, serve_http, serve_stdio

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report Ctrl-C


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve a world as an MCP server")
    add_world_flag(parser)
    add_backend_flags(parser)
    add_preset_flag(parser)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    parser.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="do not check the backend before serving (for a model server that starts after this one)",
    )
    parser.set_defaults(func=run)


def terminal_hint(world: str) -> str:
    """One line for a person who started the server at a terminal: this is not a prompt, and how to connect."""
    entry = json.dumps({"command": "aw-mcp", "args": ["serve", "--world", world]})
    return (
        f"aw-mcp: serving world {world!r} as an MCP server on stdin/stdout; a terminal is not an MCP client. "
        f'Connect an agent with an mcpServers entry such as {{"{world}": {entry}}}, try the tools by hand with '
        f"`aw-mcp shell --world {world}`, or press Ctrl-C to quit."
    )


def exit_on_interrupt(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C at a terminal ends the server at once. The stdio transport reads stdin in a worker thread that no
    cancellation reaches, so a graceful shutdown would wait for a line that never comes. Trajectories are flushed
    per call, so nothing recorded is lost."""
    sys.stderr.write("\n")
    sys.stderr.flush()
    os._exit(INTERRUPTED_EXIT)


def run(args: argparse.Namespace) -> int:
    setup = setup_world(args)
    if args.preflight:
        preflight(setup.backend)
    app = WorldApp(setup.simulator, setup.spec_text)
    if args.transport == "http":
        sock = listen_socket(args.host, args.port)
        anyio.run(serve_http, app, args.host, args.port, sock)
        return 0
    if sys.stdin.isatty():
        print(terminal_hint(args.world), file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, exit_on_interrupt)
    anyio.run(serve_stdio, app)
    return 0
