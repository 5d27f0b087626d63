"""gpu_check part: forks on one engine (issue 24, bench/env_fork_engine.py on the tiny model): a fork's first call
against a cold call, and 16 envs batched against one after another."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from gpu_check_setup import Context

BENCH = Path(__file__).resolve().parent


def env_forks(ctx: Context) -> None:
    missing = [
        name for name in ("pydantic", "mcp", "yaml", "anyio") if importlib.util.find_spec(name) is None
    ]
    if missing:
        ctx.rows.skip(
            "env forks",
            f"aw_mcp needs {', '.join(missing)}, not on this image: write their wheels to .whl/ with "
            "bench/gpu_wheels.sh and carry .whl (bench/gpu_check.sh installs .whl/*.whl first)",
        )
        return
    device, tokens, calls = ("cpu", 8, 2) if ctx.dry_run else ("cuda", 64, 4)
    command = [
        sys.executable,
        str(BENCH / "env_fork_engine.py"),
        "--device",
        device,
        "--max-tokens",
        str(tokens),
    ]
    done = subprocess.run(
        [*command, "--calls", str(calls)],
        capture_output=True,
        text=True,
        timeout=max(5.0, ctx.remaining() - 3),
    )
    print(done.stdout[-3000:], done.stderr[-2000:], sep="\n", flush=True)
    start, end = done.stdout.find("{"), done.stdout.rfind("}")
    if done.returncode not in (0, 1) or start < 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"env_fork_engine.py exited {done.returncode}: {last[:300]}")
    figures = json.loads(done.stdout[start : end + 1])
    ctx.rows.measure(
        "fork first call / cold call TTFT",
        figures["fork_first_call_ttft_ms_median"] / figures["cold_call12_ttft_ms"],
        "x",
        at_most=0.35,
        note=f"cold {figures['cold_call12_ttft_ms']:.1f} ms, fork median {figures['fork_first_call_ttft_ms_median']:.1f} ms",
    )
    ctx.rows.measure(
        "16 envs concurrent / sequential",
        figures["concurrent_over_sequential"],
        "x",
        at_least=2.5,
        note=f"{figures['concurrent_calls_per_s']:.1f} vs {figures['sequential_calls_per_s']:.1f} calls/s",
    )
