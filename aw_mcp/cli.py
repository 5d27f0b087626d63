"""`aw-mcp`: the command line. Errors a user can fix are one clear message on stderr and exit code 1 or 2."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from aw_mcp import __version__
from aw_mcp.backends.base import BackendError
from aw_mcp.backends.resolve import BackendConfigError
from aw_mcp.commands import bench, call, engine, import_world, judge, report, serve, shell, validate, worlds
from aw_mcp.session import TrajectoryFormatError
from aw_mcp.simulator import UnknownToolError
from aw_mcp.world import WorldSpecError

COMMANDS = (serve, validate, call, worlds, engine, import_world, shell, report, judge, bench)
USER_ERRORS = (
    WorldSpecError,
    BackendConfigError,
    BackendError,
    TrajectoryFormatError,
    UnknownToolError,
    ValueError,
    OSError,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aw-mcp", description="MCP tools simulated by the Qwen-AgentWorld language world model."
    )
    parser.add_argument("--version", action="version", version=f"aw-mcp {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["engine"]:  # the engine has its own parser; pass everything through untouched
        return engine.run(argparse.Namespace(engine_args=argv[1:]))
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,  # stdout belongs to the MCP protocol
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except call.UsageError as exc:  # a ValueError too: it must come first
        print(f"aw-mcp {args.command}: {exc}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        print(f"aw-mcp {args.command}: {exc}", file=sys.stderr)
        return 1
