"""The agent's per-call latency through `aw-mcp mirror` with `--shadow` against without, on one real server, both
measured in this run: the ratio shadowed / plain of the median call (the target: within 10%).

    AW_UPSTREAMS=/tmp/upstreams python bench/mirror_shadow.py            # server-memory, 30 calls each, 1 s model
    python bench/mirror_shadow.py --calls 50 --model-delay 2 --server /path/to/mcp-server-memory

The world model is the tests' scripted OpenAI-compatible server (tests/fake_openai.py), slow on purpose
(`--model-delay` seconds per prediction, far slower than the upstream), so a prediction on the agent's path would
show at once. Each run is a fresh mirror and a fresh memory file; the agent makes the same calls in both."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

from tests.fake_openai import Reply, ScriptedOpenAIServer  # noqa: E402
from tests.mirror.upstreams import find  # noqa: E402


async def agent(server: str, flags: list[str], calls: int, folder: Path) -> list[float]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aw_mcp", "mirror", *flags, "--", server],
        env={**os.environ, "MEMORY_FILE_PATH": str(folder / f"memory-{len(flags)}.jsonl")},
    )
    latencies = []
    async with Client(params, mode="legacy") as client:
        await client.call_tool("read_graph", {})  # warm: the upstream and the mirror started
        for i in range(calls):
            entity = {"name": f"e{i}", "entityType": "thing", "observations": [f"o{i}"]}
            name, arguments = (
                ("create_entities", {"entities": [entity]})
                if i % 2 == 0
                else ("search_nodes", {"query": f"e{i - 1}"})
            )
            started = time.perf_counter()
            await client.call_tool(name, arguments)
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--model-delay", type=float, default=1.0)
    parser.add_argument("--server", default=find("mcp-server-memory"))
    args = parser.parse_args()
    if not args.server:
        print("mcp-server-memory not found: set AW_UPSTREAMS or --server", file=sys.stderr)
        return 2

    def slow(body: dict, number: int) -> Reply:
        return Reply(
            content='**Environment Observation:**\n{"entities": [], "relations": []}',
            delay_s=args.model_delay,
        )

    with tempfile.TemporaryDirectory() as folder, ScriptedOpenAIServer(slow) as model:
        plain = anyio.run(agent, args.server, ["--record", f"{folder}/plain.jsonl"], args.calls, Path(folder))
        shadow_flags = ["--record", f"{folder}/shadow.jsonl", "--shadow", "--base-url", model.base_url]
        shadowed = anyio.run(
            agent, args.server, [*shadow_flags, "--model", "fake-world-model"], args.calls, Path(folder)
        )
        predictions = len(model.requests)
    p, s = statistics.median(plain), statistics.median(shadowed)
    print(f"calls {args.calls} each; model delay {args.model_delay:g} s; predictions requested {predictions}")
    print(f"plain mirror:    median {p:.2f} ms  p90 {sorted(plain)[int(len(plain) * 0.9)]:.2f} ms")
    print(f"mirror --shadow: median {s:.2f} ms  p90 {sorted(shadowed)[int(len(shadowed) * 0.9)]:.2f} ms")
    print(f"ratio shadowed / plain (median): {s / p:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
