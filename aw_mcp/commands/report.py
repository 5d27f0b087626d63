"""`aw-mcp report`: a trajectory's text summary on stdout and a self-contained HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path

from aw_mcp.report import text_summary, write_report


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="summarize a recorded trajectory (text + HTML)")
    parser.add_argument("trajectory", metavar="TRAJECTORY", help="a trajectory written by --record")
    parser.add_argument("-o", "--output", help="HTML file to write (default: TRAJECTORY with .html)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output = Path(args.output) if args.output else Path(args.trajectory).with_suffix(".html")
    summary = write_report(args.trajectory, output)
    print(text_summary(summary))
    print(f"report: {output}")
    return 0
