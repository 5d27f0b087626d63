"""`aw-mcp`: the command line.

A mistake the user can fix (a `UserError`, a backend that cannot answer, a file that cannot be opened) is one line on
stderr and exit code 1 (2 for bad flags), with no traceback. Anything else is a bug and keeps its traceback. `-v`
shows the traceback for user errors too.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType

from aw_mcp.commands import SUBCOMMANDS, summary
from aw_mcp.core.errors import UserError
from aw_mcp.core.flags import Parser
from aw_mcp.core.model_io import BackendError
from aw_mcp.core.version import __version__


def command_module(name: str) -> ModuleType:
    """A subcommand's module, imported now: only the command that runs pays for what it imports."""
    return importlib.import_module(f"aw_mcp.commands.{SUBCOMMANDS[name][0]}")


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names: its first word that is not an option (the global options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: the command it names with its own flags, every other one as its `--help` line only.
    Without `argv`, every command with its flags (each module imported)."""
    parser = Parser(
        prog="aw-mcp", description="MCP tools simulated by the Qwen-AgentWorld language world model."
    )
    parser.add_argument("--version", action="version", version=f"aw-mcp {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging on stderr, and tracebacks for every error"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = chosen_command(argv) if argv is not None else None
    for name in SUBCOMMANDS:
        if argv is None or name == chosen:
            command_module(name).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary(name), add_help=False)
    return parser


def user_error_message(exc: BaseException) -> str | None:
    """The one-line message for an error the user can act on, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, UserError | BackendError):
        return str(exc)
    if (
        isinstance(exc, OSError) and exc.filename is not None
    ):  # a path the user gave: missing, unreadable, a folder
        return f"{exc.filename}: {exc.strerror or exc}"
    return None


def exit_code(exc: BaseException) -> int:
    return exc.exit_code if isinstance(exc, UserError) else 1


# 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away (`aw-mcp worlds | head -1`).
BROKEN_PIPE_EXIT = 141


def main(argv: Sequence[str] | None = None) -> int:
    """A closed stdout (the reader of a pipe went away) ends the command quietly with exit 141, as Unix tools do;
    whatever was still to be printed goes nowhere, not into a traceback."""
    try:
        code = run(argv)
        sys.stdout.flush()  # inside the try: a pipe closed under buffered output fails here, not at exit
        return code
    except BrokenPipeError:
        # Python flushes stdout once more at exit, which would fail again: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_EXIT


def run(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["engine"]:  # the engine has its own parser; pass everything through untouched
        engine = command_module("engine")
        args = argparse.Namespace(command="engine", verbose=False, engine_args=argv[1:], func=engine.run)
    else:
        args = build_parser(argv).parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,  # stdout belongs to the MCP protocol
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # main() ends quietly
    except Exception as exc:
        message = user_error_message(exc)
        if message is None:
            raise  # a bug: Python prints the whole traceback (exit 1)
        if args.verbose:
            traceback.print_exc()
        print(f"aw-mcp {args.command}: {message}", file=sys.stderr)
        return exit_code(exc)
