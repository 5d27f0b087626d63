"""`aw-mcp shell`: try a world by hand. One line per command; works at a terminal (prompt, tool-name completion,
line editing) and piped (no prompt, one result per call; `--json` makes each result one JSON line).

    tools                      list the tools
    call TOOL {json}           call a tool (the word `call` is optional)
    history                    this session's calls so far
    help | quit

All calls share one world session, so later calls see earlier ones exactly as an agent's would.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Iterator
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any, TextIO

from anyio.from_thread import BlockingPortal, start_blocking_portal

from aw_mcp.commands import summary
from aw_mcp.sim.simulator import CallOutcome, Simulator, UnknownToolError
from aw_mcp.sim.world_setup import add_backend_flags, add_preset_flag, add_world_flag, setup_world

COMMANDS = ("tools", "call", "history", "help", "quit", "exit")
HELP = """\
commands:
  tools                  list the tools of this world
  call TOOL {json}       call TOOL with JSON arguments (`TOOL {json}` works too; {} when omitted)
  history                the calls of this session so far
  help                   this text
  quit                   leave (Ctrl-D works too)"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("shell", help=summary("shell"))
    add_world_flag(parser)
    parser.add_argument("--json", action="store_true", help="print each result as one JSON object per line")
    add_backend_flags(parser)
    add_preset_flag(parser)
    parser.set_defaults(func=run)


class LineError(ValueError):
    """A line the shell cannot run; printed, and the shell goes on."""


@dataclass
class Command:
    verb: str  # tools | call | history | help | quit
    tool: str = ""
    arguments: dict[str, Any] | None = None


def parse_line(line: str) -> Command | None:
    """None for a blank line or a `#` comment."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    head, _, rest = text.partition(" ")
    if head in ("quit", "exit"):
        return Command("quit")
    if head in ("tools", "history", "help") and not rest.strip():
        return Command(head)
    if head == "call":
        head, _, rest = rest.strip().partition(" ")
        if not head:
            raise LineError("usage: call TOOL {json arguments}")
    rest = rest.strip() or "{}"
    try:
        arguments = json.loads(rest)
    except json.JSONDecodeError as exc:
        raise LineError(
            f"arguments for {head} are not valid JSON: {exc.msg} at character {exc.pos}"
        ) from None
    if not isinstance(arguments, dict):
        raise LineError(f'arguments for {head} must be a JSON object, e.g. {{"id": 7}}')
    return Command("call", head, arguments)


class Shell:
    def __init__(
        self, simulator: Simulator, portal: BlockingPortal, out: TextIO, as_json: bool, interactive: bool
    ):
        self.simulator = simulator
        self.portal = portal
        self.out = out
        self.as_json = as_json
        self.interactive = interactive

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def problem(self, message: str, line_number: int) -> None:
        if self.as_json:
            self.say(json.dumps({"error": message, "line": line_number}))
        else:
            where = "" if self.interactive else f"line {line_number}: "
            print(f"error: {where}{message}", file=sys.stderr, flush=True)

    def run(self, lines: Iterator[str]) -> int:
        for number, line in enumerate(lines, start=1):
            try:
                command = parse_line(line)
                if command is None:
                    continue
                if command.verb == "quit":
                    break
                getattr(self, f"do_{command.verb}")(command)
            except LineError as exc:
                self.problem(str(exc), number)
            except UnknownToolError as exc:
                self.problem(str(exc), number)
        return 0

    def do_help(self, command: Command) -> None:
        self.say(json.dumps({"help": HELP}) if self.as_json else HELP)

    def do_tools(self, command: Command) -> None:
        tools = self.simulator.world.tools
        if self.as_json:
            self.say(json.dumps({"tools": [t.wire() for t in tools]}, ensure_ascii=False))
            return
        for tool in tools:
            hints = tool.annotations
            flags = [
                label
                for label, on in (
                    ("read-only", hints and hints.readOnlyHint),
                    ("destructive", hints and hints.destructiveHint),
                    ("structured", tool.structured),
                )
                if on
            ]
            required = tool.inputSchema.get("required", [])
            optional = [p for p in tool.inputSchema.get("properties", {}) if p not in required]
            signature = ", ".join([*required, *(f"{p}?" for p in optional)])
            summary = (tool.title or tool.description.strip().split("\n")[0])[:70]
            flag_text = f" [{', '.join(flags)}]" if flags else ""
            self.say(f"{tool.name}({signature}){flag_text}  {summary}")

    def do_history(self, command: Command) -> None:
        records = self.simulator.registry.get(None).records
        if self.as_json:
            self.say(json.dumps({"history": [r.to_json() for r in records]}, ensure_ascii=False, default=str))
            return
        if not records:
            self.say("(no calls yet)")
        for record in records:
            status = "error" if record.is_error else "ok"
            arguments = json.dumps(record.arguments, ensure_ascii=False)
            self.say(f"#{record.index} {record.tool} {arguments} -> {status}, {record.latency_ms:.0f} ms")

    def do_call(self, command: Command) -> None:
        self.simulator.tool(command.tool)  # unknown tool: a clear message before any model call
        future = self.portal.start_task_soon(self.simulator.call, command.tool, command.arguments, None, None)
        try:
            outcome: CallOutcome = future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise LineError(f"{command.tool}: call interrupted") from None
        except CancelledError:
            raise LineError(f"{command.tool}: call cancelled") from None
        self.show(command, outcome)

    def show(self, command: Command, outcome: CallOutcome) -> None:
        record = outcome.record
        faults = [f.to_json() for f in record.faults] if record is not None else []
        latency = round(record.latency_ms, 1) if record is not None else None
        notice = record.notice if record is not None else None  # not the world model's answer (demo)
        if self.as_json:
            line = {
                "tool": command.tool,
                "arguments": command.arguments,
                "is_error": outcome.is_error,
                "text": outcome.text,
                "structured": outcome.structured,
                "latency_ms": latency,
                "faults": faults,
                "notice": notice,
            }
            self.say(json.dumps(line, ensure_ascii=False, default=str))
            return
        if outcome.structured is not None:
            self.say(json.dumps(outcome.structured, indent=2, ensure_ascii=False))
        else:
            self.say(outcome.text)
        status = "error" if outcome.is_error else "ok"
        self.say(f"[{status}, {latency} ms]")
        if notice:  # the label every MCP result of this call carries
            self.say(f"[{notice}]")
        for fault in faults:
            self.say(f"[fault: {json.dumps(fault, ensure_ascii=False, default=str)}]")


def _piped_lines(stream: TextIO) -> Iterator[str]:
    yield from stream


def _prompt_lines(prompt: str) -> Iterator[str]:
    while True:
        try:
            yield input(prompt)
        except EOFError:
            print()
            return
        except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line, as in a normal shell
            print()


def _enable_completion(simulator: Simulator) -> None:
    try:
        import readline
    except ImportError:  # not every platform has it; the shell works without completion
        return
    words = sorted({*COMMANDS, *(t.name for t in simulator.world.tools)})

    def complete(text: str, state: int) -> str | None:
        buffer = readline.get_line_buffer()
        parts = shlex.split(buffer) if buffer.count('"') % 2 == 0 else buffer.split()
        position = len(parts) - (0 if buffer.endswith(" ") or not parts else 1)
        if position > 1 or (position == 1 and parts[0] != "call"):
            return None  # only the command or tool name is completed, not JSON arguments
        choices = [w for w in words if w.startswith(text)]
        return choices[state] if state < len(choices) else None

    readline.set_completer_delims(" \t")
    readline.set_completer(complete)
    readline.parse_and_bind("tab: complete")


def run(args: argparse.Namespace) -> int:
    setup = setup_world(args)
    simulator = setup.simulator
    interactive = sys.stdin.isatty()
    if interactive:
        _enable_completion(simulator)
        print(f"{simulator.world.name}: {len(simulator.world.tools)} tools. Type `help` for commands.")
        lines = _prompt_lines(f"{simulator.world.name}> ")
    else:
        lines = _piped_lines(sys.stdin)
    with start_blocking_portal() as portal:  # the event loop runs in a thread; input() stays in the main one
        try:
            return Shell(simulator, portal, sys.stdout, args.json, interactive).run(lines)
        finally:
            portal.call(simulator.backend.aclose)
