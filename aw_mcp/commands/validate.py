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
    errors = [i for i in issues if i.severity == "error"]
    warnings = len(issues) - len(errors)
    bad_files = len({i.path for i in errors})
    total = len(args.paths)
    if errors:
        print(f"{len(errors)} problem(s) in {bad_files} of {total} file(s)", file=sys.stderr)
        return 1
    note = f" ({warnings} warning(s))" if warnings else ""
    print(f"{total} world file(s) valid{note}")
    return 0
