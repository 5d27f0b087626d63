"""Forks on one engine (issue 24; not a test): do forks reuse the engine's prefix cache, and does the step loop
batch many envs? Runs on the tiny random model (engine/testing), CPU or GPU.

1. TTFT of a fork's first call vs a cold call: one `Env` drives a 12-call session; its call 12 is measured with the
   prefix cache emptied first (cold). The session is then forked 16 ways and each child's first call is measured
   (its prompt starts with the parent's conversation: a prefix-cache hit). Answers are 1 token long, so a call's
   latency is its time to first token. Target: the forks' median <= 0.35x the cold call.
2. Throughput: 16 envs, each making CALLS calls of MAX_TOKENS-token answers, driven concurrently (the engine's step
   loop batches them) vs one after another. Target: >= 2.5x.

    .venv/bin/python bench/env_fork_engine.py [--device cpu] [--calls 4] [--max-tokens 16]
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aw_mcp import Env  # noqa: E402
from engine.testing.tiny_checkpoint import make_tiny_checkpoint  # noqa: E402

# A world whose tool has no outputSchema: a random model's answer is accepted as text, so one call is one request.
WORLD = """
name: fork-bench
description: A key-value store; every call reads or writes one key.
seed: 5
tools:
  - name: get_value
    description: Read the value stored under a key.
    inputSchema:
      type: object
      properties: {key: {type: string}}
      required: [key]
"""


# A short system prompt: the tiny model's 300-token vocabulary makes the bundled one ~4k tokens, whose attention
# then dominates a CPU decode step (on a GPU it would not); the bench is about reuse and batching, not the prompt.
SHORT_TEMPLATE = "# Role and Objective\n\nYou are a **Tool World Model**. Tools:\n{tool_definitions}\n"


def engine_of(env: Env):  # the LocalWorldModel's LLM, to empty its prefix cache for the cold measurement
    return env._simulator.backend._load()


async def timed(env: Env, key: str) -> float:
    started = time.perf_counter()
    await env.call("get_value", {"key": key})
    return (time.perf_counter() - started) * 1000


async def run(
    model: Path, world: Path, prompts: Path | None, device: str, calls: int, max_tokens: int
) -> dict[str, object]:
    base = {"backend": "local", "model": str(model), "device": device, "thinking": False}
    if prompts is not None:
        base["prompts"] = str(prompts)

    async def drive(env: Env, name: str) -> None:
        for k in range(calls):
            await env.call("get_value", {"key": f"{name}-{k}"})

    async with await Env.open(world, max_tokens=max_tokens, **base) as root:
        await root.call("get_value", {"key": "warm-up"})
        group = await root.fork(16)
        stats = engine_of(root).engine.prefix_cache.stats
        before = (stats.hit_tokens, stats.query_tokens)
        started = time.perf_counter()
        for i, env in enumerate(group):
            await drive(env, f"seq{i}")
        sequential_s = time.perf_counter() - started
        seq_hit = (stats.hit_tokens - before[0]) / max(1, stats.query_tokens - before[1])
        before = (stats.hit_tokens, stats.query_tokens)
        group2 = await root.fork(16)
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i, env in enumerate(group2):
                tg.start_soon(drive, env, f"par{i}")
        concurrent_s = time.perf_counter() - started
        par_hit = (stats.hit_tokens - before[0]) / max(1, stats.query_tokens - before[1])
        for env in [*group, *group2]:
            await env.close()
    async with await Env.open(world, max_tokens=1, **base) as parent:
        for k in range(11):
            await parent.call("get_value", {"key": f"k{k}"})
        engine_of(parent).engine.prefix_cache.clear()
        cold_ms = await timed(parent, "k11")  # call 12, nothing cached
        children = await parent.fork(16)
        fork_ms = [await timed(child, "after-fork") for child in children]
        for child in children:
            await child.close()

    fork_median = statistics.median(fork_ms)
    return {
        "device": device,
        "cold_call12_ttft_ms": round(cold_ms, 1),
        "fork_first_call_ttft_ms_median": round(fork_median, 1),
        "fork_over_cold": round(fork_median / cold_ms, 3),
        "calls_per_env": calls,
        "max_tokens": max_tokens,
        "sequential_calls_per_s": round(16 * calls / sequential_s, 2),
        "concurrent_calls_per_s": round(16 * calls / concurrent_s, 2),
        "concurrent_over_sequential": round(sequential_s / concurrent_s, 2),
        "prefix_hit_rate_sequential": round(seq_hit, 3),
        "prefix_hit_rate_concurrent": round(par_hit, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--bundled-prompt",
        action="store_true",
        help="use the bundled (long) system prompt instead of a short one",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_checkpoint(Path(tmp) / "tiny")
        world = Path(tmp) / "world.yaml"
        world.write_text(WORLD)
        prompts = None
        if not args.bundled_prompt:
            prompts = Path(tmp) / "prompts"
            (prompts / "mcp").mkdir(parents=True)
            (prompts / "mcp" / "system_prompt.txt").write_text(SHORT_TEMPLATE)
        figures = anyio.run(run, model, world, prompts, args.device, args.calls, args.max_tokens)
        figures["system_prompt"] = "bundled" if args.bundled_prompt else "short"
    print(json.dumps(figures, indent=2))
    ok = figures["fork_over_cold"] <= 0.35 and figures["concurrent_over_sequential"] >= 2.5
    print("PASS" if ok else "FAIL", "(targets: fork/cold TTFT <= 0.35, concurrent/sequential >= 2.5)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
