"""`aw-mcp judge`: score each recorded observation of a trajectory with the trained judge protocol.

One result line per judged call goes to TRAJECTORY.judge.jsonl (flushed at once; a rerun skips calls already
judged), and the trajectory's HTML report gets the scores per call and per session.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict

from aw_mcp.backends.openai import OpenAIWorldModel
from aw_mcp.commands import summary
from aw_mcp.core.errors import UsageError
from aw_mcp.core.jsonl import read_models
from aw_mcp.core.private_files import open_private
from aw_mcp.eval.judging import (
    judge_one,
    judge_output,
    judge_system_prompt,
    judge_user_message,
    load_closing,
    normalized,
    reference_form,
    world_reference,
)
from aw_mcp.eval.report import judge_path, write_report
from aw_mcp.load.world import load_world
from aw_mcp.prompt.catalog import CatalogForm
from aw_mcp.prompt.render import Turn
from aw_mcp.prompt.templates import prompt_dir
from aw_mcp.prompt.transcript import Transcript
from aw_mcp.spec.bundled import bundled_worlds, resolve_world_path
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import CallRecord, TrajectoryFormatError, read_trajectory


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("judge", help=summary("judge"))
    parser.add_argument("trajectory", metavar="TRAJECTORY", help="a trajectory written by --record")
    parser.add_argument("--base-url", required=True, help="the judge's OpenAI-compatible server (…/v1)")
    parser.add_argument("--model", required=True, help="the judge model")
    parser.add_argument(
        "--reference",
        metavar="REF.jsonl",
        help="real observations to compare with: JSON lines with index (0-based call index), observation and "
        "optionally session (a recorded trajectory works). Without it the judge grades against the world itself",
    )
    parser.add_argument("--world", help="the world file (default: the bundled world named in the trajectory)")
    parser.add_argument("--prompts", metavar="DIR", help="prompt templates laid out like prompts/")
    parser.add_argument(
        "--judge-closing",
        metavar="FILE",
        help="the judge message's closing request, read verbatim (default: ours, in eval.py's structure)",
    )
    parser.add_argument("-o", "--output", help="HTML report to write (default: TRAJECTORY with .html)")
    parser.set_defaults(func=run)


class ReferenceLine(BaseModel):
    model_config = ConfigDict(extra="ignore")

    index: int
    observation: str
    session: str | None = None


def load_reference(path: str) -> dict[tuple[str | None, int], str]:
    out: dict[tuple[str | None, int], str] = {}
    for _, _, entry in read_models(path, ReferenceLine):
        out[(entry.session, entry.index)] = entry.observation
    return out


def find_world(args: argparse.Namespace, records: list[CallRecord]) -> tuple[WorldSpec, Path]:
    if args.world:
        path = resolve_world_path(args.world)
        return load_world(path), path
    names = {r.world for r in records}
    for path in bundled_worlds():
        world = load_world(path)
        if world.name in names:
            return world, path
    raise UsageError(
        f"the trajectory's world ({', '.join(map(str, names))}) is not bundled: pass --world PATH"
    )


def judge_jobs(world: WorldSpec, records: list[CallRecord]) -> list[dict[str, Any]]:
    """Each judgeable call with the conversation the world model saw: earlier turns and the current turn."""
    jobs = []
    sessions: dict[str, list[CallRecord]] = {}
    for record in records:
        sessions.setdefault(str(record.session), []).append(record)
    for session, calls in sessions.items():
        transcript = Transcript(world)  # the turns as the world model saw them (screens, numbers)
        for record in sorted(calls, key=lambda r: r.index):
            observation = record.truth or record.observation
            if observation is None or record.error is not None:
                continue
            shown = transcript.prompt("", record.tool, record.arguments).messages
            earlier = shown[1:-1]  # user, assistant for each earlier turn, in order
            jobs.append(
                {
                    "session": session,
                    "index": record.index,
                    "tool": record.tool,
                    # eval.py's context: each earlier (prompt, response) pair once, in order.
                    "context": [
                        (u["content"], a["content"]) for u, a in zip(earlier[::2], earlier[1::2], strict=True)
                    ],
                    "prompt": shown[-1]["content"],
                    # The world model's own answer, extracted as eval.py extracts it (its fences and layout kept);
                    # the parsed observation only when no raw answer was recorded.
                    "output": judge_output(record.raw) if record.raw is not None else str(record.observation),
                }
            )
            if record.in_history:
                transcript.append(Turn(record.tool, record.arguments, observation))
    return jobs


async def _judge(args: argparse.Namespace) -> int:
    records = list(read_trajectory(args.trajectory))
    if not records:
        raise TrajectoryFormatError(f"{args.trajectory}: no calls to judge")
    world, world_path = find_world(args, records)
    template = prompt_dir(args.prompts, world.prompts, world_path).load(world.domain, "judge_system_prompt")
    reference = load_reference(args.reference) if args.reference else None
    form = reference_form(world)
    systems: dict[str | None, str] = {}  # a compact catalog shows the judged call's tool whole
    closing = load_closing(args.judge_closing)
    out_path = judge_path(args.trajectory)
    done = set()
    if out_path.exists():
        for line in out_path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                if entry.get("judgement") is not None:
                    done.add((entry["session"], entry["index"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut short by a crash: judged again
    judge = OpenAIWorldModel(args.base_url, args.model)
    try:
        with open_private(out_path, "a") as out:  # it quotes the calls: owner-only, like the trajectory
            for job in judge_jobs(world, records):
                if (job["session"], job["index"]) in done:
                    continue
                truth = None
                if reference is not None:
                    truth = reference.get((job["session"], job["index"]), reference.get((None, job["index"])))
                user = judge_user_message(job["context"], job["prompt"], job["output"], truth, closing)
                shown = job["tool"] if form is CatalogForm.COMPACT else None
                system = systems.get(shown)
                if system is None:
                    reference_text = world_reference(world, shown, form)
                    system = systems[shown] = judge_system_prompt(template, reference_text)
                judgement, raw = await judge_one(judge, system, user)
                entry = {
                    "session": job["session"],
                    "index": job["index"],
                    "tool": job["tool"],
                    "against": "reference" if truth is not None else "world",
                    "judgement": judgement,
                    "raw": raw,
                }
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")
                out.flush()
                label = f"call {job['index'] + 1} ({job['tool']}, session {job['session']})"
                if judgement is None:
                    print(f"{label}: the judge gave no parsable scores ({raw[:200]})", file=sys.stderr)
                elif not judgement["mean"]:
                    print(
                        f"{label}: the judge's scores are all invalid (0): left out of the means",
                        file=sys.stderr,
                    )
                else:
                    scores = " ".join(f"{k} {v}" for k, v in judgement["scores"].items())
                    print(f"{label}: {judgement['score']:.1f} ({scores}; against the {entry['against']})")
    finally:
        await judge.aclose()
    summary = write_report(args.trajectory, args.output or Path(args.trajectory).with_suffix(".html"))
    for session, (count, mean) in summary.judge_sessions().items():
        print(f"session {session}: {normalized(mean):.2f} over {count} judged call(s) (mean {mean:.2f} of 5)")
    if reference is None:
        print(
            "no --reference: the judge graded each observation against the world reference in its system prompt "
            "(the world's description, facts, state and tools) and the earlier turns"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    return anyio.run(_judge, args)
