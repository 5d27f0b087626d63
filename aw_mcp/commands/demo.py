"""`aw-mcp demo`: the whole product in under a minute on any machine, without a model.

A real MCP client session (the SDK's stdio client) drives `aw-mcp serve` in a subprocess, the same server path an
agent uses, against a bundled world with a fault preset that fires; the trajectory is recorded and turned into the
HTML report. The answers are the world's own examples replayed by the `demo` backend, and every observation says
so: nothing here is the world model's output.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from aw_mcp.backends.demo import NOTICE
from aw_mcp.commands import summary
from aw_mcp.core.errors import UsageError
from aw_mcp.eval.report import faults_fired_text, text_summary, write_report
from aw_mcp.load.world import load_world
from aw_mcp.spec.bundled import resolve_world_path
from aw_mcp.spec.world import WorldSpec

DEFAULT_WORLD = "mcp_crm"
CALL_TIMEOUT_S = 60.0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help=summary("demo"))
    parser.add_argument(
        "--world", default=DEFAULT_WORLD, help=f"a world whose tools have examples (default {DEFAULT_WORLD})"
    )
    parser.add_argument(
        "-o",
        "--output-dir",
        metavar="DIR",
        help="where the trajectory and report go (default: a new temp folder)",
    )
    parser.set_defaults(func=run)


def fault_target(world: WorldSpec) -> str:
    """The tool the demo's fault preset aims at: the first tool that writes (an outage where it hurts)."""
    writers = [t.name for t in world.tools if not (t.annotations and t.annotations.readOnlyHint)]
    return (writers or [world.tools[0].name])[0]


def demo_plan(world: WorldSpec) -> list[tuple[str, dict[str, Any]]]:
    """One call per tool that has an example, with that example's arguments, in the world's order."""
    return [(t.name, dict(t.examples[0].arguments)) for t in world.tools if t.examples]


def first_line(text: str, width: int = 100) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


async def run_session(
    world_path: Path, preset: str, record: Path, plan: list[tuple[str, dict[str, Any]]]
) -> None:
    from mcp import Client, StdioServerParameters

    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aw_mcp", "serve", "--world", str(world_path), "--backend", "demo"]
        + ["--preset", preset, "--record", str(record)],
    )
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
        print(f"tools/list: {len(tools)} tools: {', '.join(t.name for t in tools)}")
        for name, arguments in plan:
            result = await client.call_tool(name, arguments, read_timeout_seconds=CALL_TIMEOUT_S)
            texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
            status = "isError" if result.is_error else "ok"
            print(f"\ntools/call {name} {json.dumps(arguments, ensure_ascii=False)} -> {status}")
            print(f"  {first_line(texts[0] if texts else '')}")
            for note in texts[1:]:
                print(f"  {note}")
        faults = await client.read_resource("world://faults")
        fired = json.loads(faults.contents[0].text)["faults"]  # type: ignore[union-attr]
        without_effect = sum(not fault.get("applied", True) for fault in fired)
        print(f"\nworld://faults: {faults_fired_text(len(fired), without_effect)}")  # as the summary counts
        for fault in fired:
            effect = "applied" if fault.get("applied", True) else f"no effect: {fault.get('reason', '')}"
            print(f"  call {fault['index']} {fault['tool']}: {fault['name']} ({fault['kind']}, {effect})")


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    world_path = resolve_world_path(args.world)
    world = load_world(world_path)
    plan = demo_plan(world)
    if not plan:
        raise UsageError(
            f"world {world.name!r} has no tool examples for the demo to answer with; try --world {DEFAULT_WORLD}"
        )
    out = Path(args.output_dir) if args.output_dir else Path(tempfile.mkdtemp(prefix="aw-mcp-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    record, report = out / "trajectory.jsonl", out / "report.html"
    record.unlink(missing_ok=True)  # a rerun into the same folder starts a fresh session
    target = fault_target(world)
    preset = f"flaky:probability=1.0,tools={target}"
    print(f"aw-mcp demo: world {world.name!r} ({world_path}) served over stdio by `aw-mcp serve`")
    print(f"answers: {NOTICE}")
    print(f"fault preset: --preset {preset} (every call to {target} fails like an unavailable upstream)\n")
    anyio.run(run_session, world_path, preset, record, plan)
    summary = write_report(record, report)
    print("\n" + text_summary(summary))
    print(f"\ntrajectory: {record}\nreport: {report}")
    print(
        f"done in {time.monotonic() - started:.1f} s. Next: the quick start in the README serves this world with the model."
    )
    return 0
