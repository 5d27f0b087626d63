"""`aw-mcp worlds`: list the bundled worlds."""

from __future__ import annotations

import argparse

from aw_mcp.bundled import bundled_worlds
from aw_mcp.world import WorldSpecError, load_world


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worlds", help="list the bundled worlds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for path in bundled_worlds():
        try:
            world = load_world(path)
        except WorldSpecError as exc:
            print(f"{path.stem:<24} INVALID: {exc.issues[0]}")
            continue
        summary = (world.description.strip().splitlines() or [""])[0][:70]
        print(f"{path.stem:<24} {world.domain:<9} {len(world.tools):>2} tools  {summary}")
    return 0
