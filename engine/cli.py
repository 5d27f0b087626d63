"""`engine serve --model PATH [--port N] ...`: run the OpenAI-compatible server (also `python -m engine`).

Everything that can be checked before the weights load is: the flags (a port in 1-65535), the device (one line when
it is not here), and the port itself, bound first, so a taken one fails in a second instead of after the load."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from typing import NoReturn

from engine.loader import CheckpointError
from engine.options import DeviceError, EngineOptions
from engine.tiny_model import TINY_NOTICE, is_tiny_model

MAX_PORT = 65535


class _Parser(argparse.ArgumentParser):
    """A bad flag is one line naming --help, not the usage block (as `aw-mcp` does; engine/ never imports aw_mcp)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def port_number(text: str) -> int:
    """argparse type: a TCP port. The OS takes a larger number modulo 65536 (99999 would serve on 34463)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (1-{MAX_PORT}), got {text!r}") from None
    if not 1 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 1-{MAX_PORT}, got {port}")
    return port


def build_parser(parser_class: type[argparse.ArgumentParser] = _Parser) -> argparse.ArgumentParser:
    """`parser_class`: `aw-mcp engine` passes its own (one-line errors, "did you mean" for a misspelt flag)."""
    parser = parser_class(prog="aw-mcp engine", description="Our inference engine for Qwen3.5-MoE models.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=parser_class)
    serve = commands.add_parser("serve", help="serve an OpenAI-compatible /v1/chat/completions endpoint")
    EngineOptions.add_arguments(serve)  # --model, --device, --max-model-len, ... (engine/options.py)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port_number, default=8000)
    serve.add_argument("--served-model-name", default=None, help="model id reported by the API")
    return parser


class PortError(OSError):
    """The port cannot be bound (taken, privileged, an unknown host)."""


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is loaded (SO_REUSEADDR, as uvicorn binds)."""
    try:
        return socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:  # taken, privileged, an unknown host
        taken = (
            " (another server holds it: stop it or pick another --port)"
            if exc.errno == errno.EADDRINUSE
            else ""
        )
        raise PortError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{taken}") from None


def main(argv: list[str] | None = None, parser_class: type[argparse.ArgumentParser] = _Parser) -> int:
    args = build_parser(parser_class).parse_args(argv)
    if args.command == "serve":
        options = EngineOptions.from_args(args)
        try:
            options.torch_device()  # a device this machine lacks: one line, before anything else
            sock = bind(args.host, args.port)
        except (DeviceError, PortError) as exc:
            print(f"engine: {exc}", file=sys.stderr)
            return 2
        from engine.llm import LLM
        from engine.server import serve

        try:
            llm = LLM.from_options(options)
        except (CheckpointError, FileNotFoundError, ValueError, MemoryError) as exc:
            sock.close()
            print(f"engine: cannot load the model: {exc}", file=sys.stderr)
            return 2
        if is_tiny_model(options.model):
            print(f"engine: {TINY_NOTICE}", file=sys.stderr)
        print(f"engine: {llm.memory_plan().render()}", file=sys.stderr)
        print(f"engine: {llm.sampling_defaults.describe()}", file=sys.stderr)
        serve(llm, host=args.host, port=args.port, served_model_name=args.served_model_name, sock=sock)
        return 0
    return 1
