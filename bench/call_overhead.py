"""Per-call overhead over stdio, and whether it grows with the session (issue 25, item 8; not a test).

One MCP client makes CALLS sequential `tools/call` requests to `aw-mcp serve --world mcp_crm --backend demo` (every
layer of a real call: validation, perturbation planning, the prompt, the ledger, parsing, output validation, the
trajectory line; the demo backend answers at once) and, in the same run, to the baseline: a bare MCP SDK server
(`MCPServer`) whose one tool returns a constant. Both run as stdio subprocesses of this script.

Printed: p50 per window of 100 calls for each server, the ratio late/early (calls 401-500 over calls 1-100) for
ours, and ours over the baseline (p50 over all calls). Targets: late/early <= 1.2, ours/baseline <= 3.

Also the same calls in-process through `aw_mcp.Env` (no MCP framing, issue 24): calls per second over those through
MCP over stdio. Target: >= 5x.

    .venv/bin/python bench/call_overhead.py [--calls 500] [--world mcp_crm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parent.parent
WINDOW = 100

# The baseline: the thinnest server the SDK makes, answering a constant over the same transport.
BARE_SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("bare")


@server.tool()
def search_contacts(query: str) -> str:
    return "constant"


server.run()
"""


async def timed_calls(params: StdioServerParameters, calls: int) -> list[float]:
    """Milliseconds per call, in call order (the session's first call included)."""
    durations: list[float] = []
    async with Client(params) as client:
        await client.list_tools()
        for n in range(calls):
            started = time.perf_counter()
            result = await client.call_tool("search_contacts", {"query": "murphy"})
            durations.append((time.perf_counter() - started) * 1000)
            if result.is_error:
                raise SystemExit(f"call {n + 1} failed: {result.content}")
    return durations


async def env_calls(world: str, calls: int) -> list[float]:
    from aw_mcp import Env

    durations: list[float] = []
    async with await Env.open(world, backend="demo") as env:
        for n in range(calls):
            started = time.perf_counter()
            result = await env.call("search_contacts", {"query": "murphy"})
            durations.append((time.perf_counter() - started) * 1000)
            if result.is_error:
                raise SystemExit(f"Env call {n + 1} failed: {result.content}")
    return durations


def windows(durations: list[float]) -> list[float]:
    return [statistics.median(durations[i : i + WINDOW]) for i in range(0, len(durations), WINDOW)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--world", default="mcp_crm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE_SERVER)
        ours = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "aw_mcp",
                "serve",
                "--world",
                args.world,
                "--backend",
                "demo",
                "--record",
                str(Path(tmp) / "t.jsonl"),
            ],
            cwd=str(REPO),
        )
        baseline = StdioServerParameters(command=sys.executable, args=[str(bare)])
        ours_ms = anyio.run(timed_calls, ours, args.calls)
        base_ms = anyio.run(timed_calls, baseline, args.calls)
        env_ms = anyio.run(env_calls, args.world, args.calls)
    ours_w, base_w = windows(ours_ms), windows(base_ms)
    late_early = ours_w[-1] / ours_w[0]
    overhead = statistics.median(ours_ms) / statistics.median(base_ms)
    figures = {
        "calls": args.calls,
        "world": args.world,
        "aw_mcp_p50_ms_per_100": [round(x, 2) for x in ours_w],
        "baseline_p50_ms_per_100": [round(x, 2) for x in base_w],
        "aw_mcp_late_over_early": round(late_early, 3),
        "aw_mcp_over_bare_sdk": round(overhead, 2),
        "env_p50_ms_per_100": [round(x, 3) for x in windows(env_ms)],
        "env_calls_per_s_over_stdio": round(sum(ours_ms) / sum(env_ms), 2),
    }
    print(json.dumps(figures, indent=2))
    env_speedup = figures["env_calls_per_s_over_stdio"]
    ok = late_early <= 1.2 and overhead <= 3.0 and env_speedup >= 5.0
    print(
        "PASS" if ok else "FAIL",
        "(targets: late/early <= 1.2, over the bare SDK server <= 3x, Env over stdio >= 5x calls/s)",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
