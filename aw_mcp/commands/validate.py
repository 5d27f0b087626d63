"""`aw-mcp validate`: check world files; every error in every file, `file:line: field: what was expected`."""

from __future__ import annotations

import argparse
import sys

from aw_mcp.world import validate_paths


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("validate", help="validate world YAML files")
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    issues = validate_paths(args.paths)
    for issue in issues:
        print(issue, file=sys.stderr)
    bad_files = len({i.path for i in issues})
    total = len(args.paths)
    if issues:
        print(f"{len(issues)} problem(s) in {bad_files} of {total} file(s)", file=sys.stderr)
        return 1
    print(f"{total} world file(s) valid")
    return 0
