"""Session load check over HTTP (issue 15; not a test): SESSIONS concurrent MCP clients, each with its own
2025-era transport session, make CALLS tool calls against `aw-mcp serve --transport http` backed by a scripted
OpenAI-compatible model that echoes the call's argument. Every observation must come back to the call that asked
for it (0 lost, 0 mixed). Then every client ends its session (DELETE) and the server's RSS must return to within
10% of what it was before the sessions (measured after a warm-up round of the same size).

    .venv/bin/python bench/session_load.py [--sessions 64] [--calls 50]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import SMALL_WORLD  # noqa: E402
from tests.fake_openai import Reply, ScriptedOpenAIServer  # noqa: E402

ORDER = re.compile(r'"order_id": "([^"]+)"')


def echo(body: dict, call_number: int) -> Reply:
    order = ORDER.findall(body["messages"][-1]["content"])[0]  # the action; ledger notes follow it
    return Reply(content=f"**Environment Observation:**\nOrder {order} cancelled.", reasoning="ok")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def one_session(url: str, name: str, calls: int, wrong: list[str]) -> None:
    async with Client(url, mode="legacy") as client:
        for n in range(calls):
            order = f"{name}-C{n}"
            result = await client.call_tool("cancel_order", {"order_id": order})
            text = result.content[0].text if result.content else ""
            if text != f"Order {order} cancelled.":
                wrong.append(f"{order}: {text[:120]!r}")


async def run(url: str, sessions: int, calls: int) -> tuple[int, list[str], float]:
    wrong: list[str] = []
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for s in range(sessions):
            tg.start_soon(one_session, url, f"S{s}", calls, wrong)
    return sessions * calls, wrong, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ScriptedOpenAIServer(echo) as model:
        world = Path(tmp) / "shop.yaml"
        world.write_text(SMALL_WORLD)
        port = free_port()
        env = {**os.environ, "AW_BASE_URL": model.base_url, "AW_MODEL": "scripted"}
        command = [sys.executable, "-m", "aw_mcp", "serve", "--world", str(world), "--backend", "openai"]
        proc = subprocess.Popen(
            [*command, "--transport", "http", "--port", str(port), "--record", str(Path(tmp) / "t.jsonl")],
            env=env,
            cwd=str(REPO),
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("the server did not start") from None
                    time.sleep(0.1)
            url = f"http://127.0.0.1:{port}/mcp"
            start = rss_kb(proc.pid)
            # Warm-up round of the same size: CPython and glibc keep freed memory for reuse rather than return it,
            # so the leak check compares a second identical round against the state after the first.
            _, warm_wrong, _ = anyio.run(run, url, args.sessions, args.calls)
            time.sleep(1.0)
            before = rss_kb(proc.pid)
            total, wrong, seconds = anyio.run(run, url, args.sessions, args.calls)
            wrong += warm_wrong
            peak = rss_kb(proc.pid)
            time.sleep(1.0)  # let the last DELETEs finish
            after = rss_kb(proc.pid)
            lines = (Path(tmp) / "t.jsonl").read_text().splitlines()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    recorded = sum(1 for line in lines if json.loads(line).get("error") is None)
    figures = {
        "sessions": args.sessions,
        "calls_per_session": args.calls,
        "calls": total,
        "wrong_or_lost": len(wrong),
        "recorded_ok": recorded - total,
        "seconds": round(seconds, 2),
        "calls_per_s": round(total / seconds, 1),
        "rss_at_start_mb": round(start / 1024, 1),
        "rss_before_mb": round(before / 1024, 1),
        "rss_peak_mb": round(peak / 1024, 1),
        "rss_after_delete_mb": round(after / 1024, 1),
        "rss_after_vs_before": round(after / before, 3),
    }
    print(json.dumps(figures, indent=2))
    for line in wrong[:5]:
        print("wrong:", line)
    ok = not wrong and figures["recorded_ok"] == total and after <= before * 1.10
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
