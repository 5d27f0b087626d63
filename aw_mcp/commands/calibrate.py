"""`aw-mcp calibrate TRAJECTORY...`: how close the world model's shadow predictions (aw-mcp mirror --shadow) came
to the real answers, per tool and for the world; `--fail-on` makes it a CI gate."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from aw_mcp.commands import summary
from aw_mcp.eval.calibration import METRICS, below, calibrate, calibration_text, parse_thresholds
from aw_mcp.trajectory.records import CallRecord, read_trajectory

FAILED_EXIT = 1

EPILOG = """\
examples:
  aw-mcp calibrate run.jsonl
      per tool: error agreement both ways, JSON structure and field values, text similarity; the worst calls
  aw-mcp calibrate run.jsonl --json --fail-on values=0.8,error_agreement=0.95
      the figures as JSON; exit 1 when a world-wide rate is below its threshold
  aw-mcp calibrate run.jsonl --judge --base-url http://127.0.0.1:8000/v1
      also the trained judge's five-dimension score of each prediction against the real answer
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help=summary("calibrate"),
        description="Measure the world model against a real server: the shadow predictions recorded by "
        "`aw-mcp mirror --shadow` compared with the real answers beside them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "trajectories", nargs="+", metavar="TRAJECTORY", help="trajectories recorded by a mirror"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--fail-on",
        metavar="METRIC=RATE,...",
        help=f"exit {FAILED_EXIT} when a world-wide rate is below its threshold (or unmeasured); metrics: "
        f"{', '.join(METRICS)}",
    )
    parser.add_argument(
        "--worst", type=int, default=5, metavar="N", help="divergences shown side by side (5)"
    )
    judge = parser.add_argument_group("the trained judge (--judge)")
    judge.add_argument(
        "--judge",
        action="store_true",
        help="score each prediction against the real answer with the trained judge",
    )
    judge.add_argument("--base-url", help="the judge's OpenAI-compatible server (AW_BASE_URL)")
    judge.add_argument("--model", help="the judge's model name (AW_MODEL)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    thresholds = parse_thresholds(args.fail_on) if args.fail_on is not None else {}  # before any work
    runs = [(str(path), list(read_trajectory(path))) for path in args.trajectories]
    judgements = anyio.run(judge_predictions, runs, args) if args.judge else None
    result = calibrate(runs, judgements, worst=max(0, args.worst))
    failing = below(result, thresholds)
    if args.json:
        document: dict[str, Any] = result.model_dump(mode="json")
        if thresholds:
            document["fail_on"] = {
                name: {"threshold": t, "measured": getattr(result.world, name), "passed": name not in failing}
                for name, t in thresholds.items()
            }
        print(json.dumps(document, ensure_ascii=False, indent=2))
    else:
        print(calibration_text(result))
    for name, (measured, threshold) in failing.items():
        shown = "not measured" if measured is None else f"{measured:.2%}"
        print(f"aw-mcp calibrate: FAIL {name} {shown} < {threshold:.2%}", file=sys.stderr)
    return FAILED_EXIT if failing else 0


async def judge_predictions(
    runs: list[tuple[str, list[CallRecord]]], args: argparse.Namespace
) -> dict[tuple[str, str | None, int], float]:
    """The trained judge's 1-5 mean of each prediction against the real answer, by (trajectory, session, index).
    The judge sees the calls before as its context (each tool call and its real answer), as in `aw-mcp judge`."""
    from aw_mcp.backends.resolve import open_backend, resolve_backend
    from aw_mcp.eval.calibration import real_answer
    from aw_mcp.eval.judging import judge_one, judge_system_prompt, judge_user_message
    from aw_mcp.prompt.templates import prompt_dir
    from aw_mcp.spec.world import ModelSettings

    settings = ModelSettings()
    choice = resolve_backend(settings, backend="openai", base_url=args.base_url, model=args.model)
    judge = open_backend(choice, settings)
    system = judge_system_prompt(prompt_dir(None, None, None).load("mcp", "judge_system_prompt"), None)
    out: dict[tuple[str, str | None, int], float] = {}
    try:
        for name, calls in runs:
            context: dict[str | None, list[tuple[str, str]]] = {}
            for call in sorted(calls, key=lambda c: (str(c.session), c.index)):
                turns = context.setdefault(call.session, [])
                prompt = f"{call.tool}({json.dumps(call.arguments, ensure_ascii=False)})"
                real = real_answer(call)
                shadow = call.shadow
                if real is not None and shadow is not None and shadow.error is None:
                    user = judge_user_message(turns, prompt, shadow.observation or "", real)
                    judgement, _ = await judge_one(judge, system, user)
                    if judgement is not None:
                        out[(name, call.session, call.index)] = float(judgement["mean"])
                if real is not None:
                    turns.append((prompt, real))
    finally:
        await judge.aclose()
    return out
