"""`aw-mcp import openapi|mcp|tools-list|recording`: write a world file from an API description or a live MCP server.

Warnings (each naming the JSON pointer or tool it is about) go to stderr as they arise; the written file always
passes `aw-mcp validate`, because it is validated before it is written.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio

from aw_mcp.commands import summary
from aw_mcp.core.errors import UsageError
from aw_mcp.importers.import_log import ImportLog
from aw_mcp.importers.mcp_catalog import fetch_catalog, load_samples, read_tools_list, world_from_catalog
from aw_mcp.importers.openapi import OperationFilter, import_openapi
from aw_mcp.importers.recording import import_recording
from aw_mcp.importers.world_file import check_writable, finish_world


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("import", help=summary("import"))
    kinds = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")

    openapi = kinds.add_parser("openapi", help="one tool per operation of an OpenAPI 3.0/3.1 document")
    openapi.add_argument("spec", metavar="SPEC", help="OpenAPI document (YAML or JSON file)")
    only = openapi.add_argument_group(
        "which operations", "each filter repeatable (any of its values); several filters: all must hold"
    )
    only.add_argument("--tag", action="append", default=[], metavar="TAG", help="operations with this tag")
    only.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="GLOB",
        help="operations whose path matches, e.g. '/repos/*'",
    )
    only.add_argument(
        "--operation", action="append", default=[], metavar="ID", help="the operation with this operationId"
    )
    only.add_argument("--max-tools", type=int, metavar="N", help="at most N operations (in document order)")
    _output_flags(openapi)
    openapi.set_defaults(func=run_openapi)

    live = kinds.add_parser(
        "mcp",
        help="snapshot a live MCP server's tools",
        description="Connect to an MCP server and snapshot its tools/list into a world. "
        "Give the server command after `--` (stdio), or --url for streamable HTTP.",
    )
    live.add_argument("--url", help="streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp")
    live.add_argument(
        "--sample",
        metavar="FILE",
        help='JSON {"tool": [arguments, ...]}: call these read-only tools and keep the real results as examples',
    )
    live.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default 60)")
    live.add_argument("server_command", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS")
    _output_flags(live)
    live.set_defaults(func=run_mcp)

    saved = kinds.add_parser("tools-list", help="a saved tools/list result (JSON) as a world")
    saved.add_argument("file", metavar="FILE.json")
    _output_flags(saved)
    saved.set_defaults(func=run_tools_list)

    recorded = kinds.add_parser(
        "recording",
        help="a recorded trajectory (aw-mcp mirror --record, or serve --record) as a world: its listed tools, "
        "its real calls as examples, what they established as the state",
    )
    recorded.add_argument("trajectory", metavar="TRAJECTORY")
    _output_flags(recorded)
    recorded.set_defaults(func=run_recording)


def _output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", metavar="WORLD.yaml", help="where to write the world (default: stdout)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing output file")
    parser.add_argument("--name", help="world name (default: derived from the source)")


def _header(source: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    return (
        f"Imported from {source} by `aw-mcp import` on {stamp}.\n"
        "Edit freely (add facts, state, examples); `aw-mcp validate` checks the result."
    )


def _finish(args: argparse.Namespace, world: dict, source: str, log: ImportLog, subset: str = "") -> int:
    if args.name:
        world["name"] = args.name
    text = finish_world(world, args.output, _header(source), log, subset)
    if args.output is None:
        sys.stdout.write(text)
    else:
        print(
            f"wrote {args.output}: {len(world['tools'])} tool(s), {len(log.warnings)} warning(s)",
            file=sys.stderr,
        )
    return 0


def run_openapi(args: argparse.Namespace) -> int:
    check_writable(args.output, args.force)
    if args.max_tools is not None and args.max_tools < 1:
        raise UsageError("--max-tools must be at least 1")
    log = ImportLog.to_stderr()
    only = OperationFilter(tuple(args.tag), tuple(args.path), tuple(args.operation), args.max_tools)
    world, subset = import_openapi(args.spec, log, only)
    return _finish(args, world, Path(args.spec).name, log, subset)


def run_mcp(args: argparse.Namespace) -> int:
    command = list(args.server_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if bool(command) == bool(args.url):
        raise UsageError("give either a server command after `--` (stdio) or --url (streamable HTTP)")
    check_writable(args.output, args.force)
    samples = load_samples(args.sample) if args.sample else {}
    log = ImportLog.to_stderr()
    catalog = anyio.run(fetch_catalog, args.url or command, samples, args.timeout, log)
    world = world_from_catalog(catalog, log)
    return _finish(args, world, args.url or " ".join(command), log)


def run_tools_list(args: argparse.Namespace) -> int:
    check_writable(args.output, args.force)
    log = ImportLog.to_stderr()
    world = world_from_catalog(read_tools_list(args.file), log)
    return _finish(args, world, Path(args.file).name, log)


def run_recording(args: argparse.Namespace) -> int:
    check_writable(args.output, args.force)
    log = ImportLog.to_stderr()
    world = import_recording(args.trajectory, log)
    return _finish(args, world, Path(args.trajectory).name, log)
