"""`aw-mcp call`: one tool call from the terminal, printing the observation (exit 1 when it is an error).

stdout is the observation alone (pipe it to `jq`); stderr says how the call went and, when the answer is not the
world model's (the demo backend), the same `[notice]` line the MCP result carries."""

from __future__ import annotations

import argparse
import json
import sys

import anyio

from aw_mcp.commands import summary
from aw_mcp.core.errors import UsageError
from aw_mcp.sim.world_setup import add_backend_flags, add_preset_flag, add_world_flag, setup_world


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("call", help=summary("call"))
    add_world_flag(parser)
    parser.add_argument("tool")
    parser.add_argument("--args", default="{}", help="tool arguments as a JSON object")
    add_backend_flags(parser)
    add_preset_flag(parser)
    parser.set_defaults(func=run)


def parse_arguments(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not valid JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict):
        raise UsageError("--args must be a JSON object, e.g. '{\"id\": 7}'")
    return value


async def _call(args: argparse.Namespace, arguments: dict) -> int:
    setup = setup_world(args)
    simulator = setup.simulator

    async def report(progress: float, message: str) -> None:
        print(f"\r{message}", end="", file=sys.stderr, flush=True)

    try:
        outcome = await simulator.call(args.tool, arguments, None, report)
    finally:
        await simulator.backend.aclose()
    print(file=sys.stderr)
    print(outcome.text)
    if outcome.record is not None:
        status = "error" if outcome.is_error else "ok"
        print(f"[{status}, {outcome.record.latency_ms:.0f} ms]", file=sys.stderr)
        if outcome.record.notice:  # not the world model's answer (demo): said as the MCP result says it
            print(f"[{outcome.record.notice}]", file=sys.stderr)
    return 1 if outcome.is_error else 0


def run(args: argparse.Namespace) -> int:
    return anyio.run(_call, args, parse_arguments(args.args))
