"""`engine serve --model PATH [--port N] ...`: run the OpenAI-compatible server (also `python -m engine`)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from engine.loader import CheckpointError
from engine.options import EngineOptions


class _Parser(argparse.ArgumentParser):
    """A bad flag is one line naming --help, not the usage block (as `aw-mcp` does; engine/ never imports aw_mcp)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aw-mcp engine", description="Our inference engine for Qwen3.5-MoE models.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    serve = commands.add_parser("serve", help="serve an OpenAI-compatible /v1/chat/completions endpoint")
    EngineOptions.add_arguments(serve)  # --model, --device, --max-model-len, ... (engine/options.py)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", default=None, help="model id reported by the API")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from engine.llm import LLM
        from engine.server import serve

        try:
            llm = LLM.from_options(EngineOptions.from_args(args))
        except (CheckpointError, FileNotFoundError, ValueError, MemoryError) as exc:
            print(f"engine: cannot load the model: {exc}", file=sys.stderr)
            return 2
        print(f"engine: {llm.memory_plan().render()}", file=sys.stderr)
        print(f"engine: {llm.sampling_defaults.describe()}", file=sys.stderr)
        serve(llm, host=args.host, port=args.port, served_model_name=args.served_model_name)
        return 0
    return 1
