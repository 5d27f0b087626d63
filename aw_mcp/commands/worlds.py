"""`aw-mcp worlds`: list the bundled worlds, each with its whole description (wrapped to the terminal)."""

from __future__ import annotations

import argparse
import shutil
import textwrap

from aw_mcp.commands import summary
from aw_mcp.load.world import load_world
from aw_mcp.spec.bundled import bundled_worlds
from aw_mcp.spec.issues import WorldSpecError

INDENT = "    "


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worlds", help=summary("worlds"))
    parser.set_defaults(func=run)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def describe(text: str, width: int) -> list[str]:
    """The description, every paragraph of it, wrapped to `width` and indented under the world's name."""
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    lines: list[str] = []
    for paragraph in filter(None, paragraphs):
        lines += textwrap.wrap(
            paragraph, width=width, initial_indent=INDENT, subsequent_indent=INDENT, break_on_hyphens=False
        )
    return lines


def run(args: argparse.Namespace) -> int:
    width = max(40, min(100, shutil.get_terminal_size((100, 24)).columns - 1))
    for number, path in enumerate(bundled_worlds()):
        if number:
            print()
        try:
            world = load_world(path)
        except WorldSpecError as exc:
            print(f"{path.stem:<24} INVALID: {exc.issues[0]}")
            continue
        print(f"{path.stem:<24} {world.domain:<9} {plural(len(world.tools), 'tool')}")
        for line in describe(world.description, width):
            print(line)
    return 0
