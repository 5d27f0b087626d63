"""`aw-mcp validate`: check world files; every error in every file, `file:line: field: what was expected`.

A world is named as for every other command (aw_mcp/spec/bundled.py resolve_world_path): a YAML file, or a bundled
world's name; one that names nothing is one line with the same message `serve --world` gives."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aw_mcp.commands import summary
from aw_mcp.core.errors import UnknownWorldError
from aw_mcp.load.world import validate_paths
from aw_mcp.spec.bundled import resolve_world_path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("validate", help=summary("validate"))
    parser.add_argument(
        "paths", nargs="+", metavar="WORLD", help="a world YAML file, or the name of a bundled world"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths: list[str | Path] = []
    unknown: list[str] = []
    for name in args.paths:
        try:
            paths.append(resolve_world_path(name))
        except UnknownWorldError as exc:
            unknown.append(f"aw-mcp validate: {exc}")  # word for word what `serve --world` says
    issues = validate_paths(paths)
    for line in unknown:
        print(line, file=sys.stderr)
    for issue in issues:
        print(issue, file=sys.stderr)
    errors = [i for i in issues if i.severity == "error"]
    warnings = len(issues) - len(errors)
    bad_files = len({i.path for i in errors}) + len(unknown)
    total = len(args.paths)
    if errors or unknown:
        print(f"{len(errors) + len(unknown)} problem(s) in {bad_files} of {total} file(s)", file=sys.stderr)
        return 1
    note = f" ({warnings} warning(s))" if warnings else ""
    print(f"{total} world file(s) valid{note}")
    return 0
