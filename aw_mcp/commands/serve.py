"""`aw-mcp serve`: publish a world's tools over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse

import anyio

from aw_mcp.commands.world_setup import add_backend_flags, add_preset_flag, add_world_flag, setup_world
from aw_mcp.server import WorldApp, serve_http, serve_stdio


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve a world as an MCP server")
    add_world_flag(parser)
    add_backend_flags(parser)
    add_preset_flag(parser)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    setup = setup_world(args)
    app = WorldApp(setup.simulator, setup.spec_text)
    if args.transport == "http":
        anyio.run(serve_http, app, args.host, args.port)
    else:
        anyio.run(serve_stdio, app)
    return 0
