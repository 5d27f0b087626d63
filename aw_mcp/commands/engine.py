"""`aw-mcp engine ...`: the built-in inference engine (OpenAI-compatible server), see `engine/cli.py`."""

from __future__ import annotations

import argparse

from aw_mcp.backends.engine_extra import require_engine
from aw_mcp.commands import summary
from aw_mcp.core.flags import Parser


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "engine",
        help=summary("engine"),
        add_help=False,
    )
    parser.add_argument("engine_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require_engine("`aw-mcp engine`")
    from engine.cli import main as engine_main

    # aw-mcp's parser class: one-line errors and "did you mean" for a misspelt flag, as every aw-mcp command
    return int(engine_main(list(args.engine_args), parser_class=Parser) or 0)
