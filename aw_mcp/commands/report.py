"""`aw-mcp report`: a trajectory's text summary and robustness scorecard, a self-contained HTML report, the scorecard
as JSON, and a CI gate on it; several trajectories are scored together and compared."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aw_mcp.commands import summary
from aw_mcp.core.private_files import write_private_text
from aw_mcp.eval.report import aggregate_html, html_report, scorecard_of, summarize, text_summary
from aw_mcp.eval.scorecard import CHECKS, Rules, Scorecard, failing, parse_checks, scorecard_text


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help=summary("report"),
        description="Summarize one trajectory (text + HTML report), or score several together to compare them.",
    )
    parser.add_argument(
        "trajectories", nargs="+", metavar="TRAJECTORY", help="trajectories written by --record"
    )
    parser.add_argument(
        "-o",
        "--output",
        help="HTML file to write (default: TRAJECTORY with .html for one trajectory; none for several or --json)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the scorecard as JSON (schema: docs/scorecard.schema.json)"
    )
    parser.add_argument(
        "--fail-on",
        metavar="CHECKS",
        help=f"exit 1 when any of these comma-separated checks fails: {', '.join(CHECKS)}",
    )
    parser.add_argument(
        "--futile-after",
        type=int,
        default=Rules().futile_after,
        metavar="N",
        help="more retries than N of a failing call, none succeeding, is futile (default %(default)s)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checks = parse_checks(args.fail_on) if args.fail_on is not None else []  # before any work
    rules = Rules(futile_after=max(1, args.futile_after))
    summaries = [summarize(path) for path in args.trajectories]
    card = scorecard_of(summaries, rules)
    output = args.output
    if output is None and len(summaries) == 1 and not args.json:
        output = str(Path(summaries[0].path).with_suffix(".html"))
    if output is not None:
        page = (
            html_report(summaries[0], card, checks)
            if len(summaries) == 1
            else aggregate_html(summaries, card)
        )
        write_private_text(output, page)  # it quotes the calls: owner-only, like the trajectory
    if args.json:
        print(card.model_dump_json(indent=2))
    elif len(summaries) == 1:
        print(text_summary(summaries[0], card))
    else:
        for summary in summaries:
            print(text_summary(summary).splitlines()[0])
        print(scorecard_text(card))
    if output is not None:
        print(f"report: {output}", file=sys.stderr if args.json else sys.stdout)
    elif len(summaries) > 1:
        print("report: no HTML for several trajectories unless -o FILE names one", file=sys.stderr)
    return gate(card, checks)


def gate(card: Scorecard, checks: list[str]) -> int:
    """1 (naming each failed check and where) when a named check fails, else 0."""
    failed = failing(card, checks)
    for name, reactions in failed.items():
        where = ", ".join(
            f"{Path(r.trajectory).name}:{r.session}:call {r.call}"
            if len(card.trajectories) > 1
            else f"call {r.call}"
            for r in reactions[:10]
        )
        more = f" and {len(reactions) - 10} more" if len(reactions) > 10 else ""
        print(
            f"aw-mcp report: check failed: {name} ({CHECKS[name].means}): {len(reactions)} time(s), at {where}{more}",
            file=sys.stderr,
        )
    if checks and not failed:
        print(f"aw-mcp report: checks passed: {', '.join(checks)}", file=sys.stderr)
    return 1 if failed else 0
