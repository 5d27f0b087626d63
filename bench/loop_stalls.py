"""Another session's pings during each of issue 34's former stalls: how long the work took and the longest a 10 ms
ping waited past its time meanwhile (the promise: under 0.2 s). In-process, a scripted world model.

    python bench/loop_stalls.py

Before issue 34 (same machine, 2 shared cores, loaded): the 18-level `$ref` fan-out held the loop ~90 s, 4,000
unique objects ~18 s per 2,000, the 4 MB `format: regex` argument ~22 s, a 0.8 MB template's slot scan 24 s at
start-up, `Env.fork(10**5)` 47 s; each was a stall of every session for that long.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from aw_mcp import Env
from aw_mcp.core.model_io import Generation
from aw_mcp.load.world import load_world_text
from aw_mcp.sim.simulator import Simulator


class Scripted:
    name = "scripted"
    notice = None

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def generate(self, messages, params, on_progress=None, call=None) -> Generation:  # noqa: ANN001
        return Generation(text=f"**Environment Observation:**\n{self.answer}")

    async def aclose(self) -> None:
        return None


def fan_out(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"p": {"$ref": "#/$defs/d0"}}}


def simulator(
    input_schema: dict[str, Any], output_schema: dict[str, Any] | None = None, answer: str = "{}"
) -> Any:
    text = f"name: stalls\ntools:\n  - name: t\n    inputSchema: {json.dumps(input_schema)}\n"
    if output_schema is not None:
        text += f"    outputSchema: {json.dumps(output_schema)}\n"
    return Simulator(load_world_text(text), Scripted(answer))  # type: ignore[arg-type]


async def lag_during(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    lags: list[float] = []
    done = anyio.Event()

    async def ping() -> None:
        while not done.is_set():
            before = time.monotonic()
            await anyio.sleep(0.01)
            lags.append(time.monotonic() - before - 0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(ping)
        await anyio.sleep(0.03)
        started = time.monotonic()
        try:
            await work()
        except ValueError:  # a refusal (the 10^5 fork) is the work's answer
            pass
        took = time.monotonic() - started
        await anyio.sleep(0.03)
        done.set()
    return took, max(lags)


async def main() -> None:
    schema = fan_out(18)
    fanned = simulator(schema, schema, answer='{"p": 1}')
    unique = simulator({"type": "object", "properties": {"a": {"uniqueItems": True}}})
    regex = simulator({"type": "object", "properties": {"r": {"format": "regex"}}})
    objects = [{"i": i, "name": f"item {i}"} for i in range(4000)]
    alternation = "|".join(f"x{i}" for i in range(550_000))
    folder = Path(tempfile.mkdtemp())
    (folder / "p" / "mcp").mkdir(parents=True)
    (folder / "p" / "mcp" / "system_prompt.txt").write_text(
        "{tool_definitions}\n{facts}\n{initial_state}\n" + "filler line {now}\n" * 66_000  # 1.2 MB
    )
    (folder / "w.yaml").write_text(
        "name: t\nprompts: p\nmodel: {context_tokens: 10000000}\ntools: [{name: t}]\n"
    )
    big_state = "name: s\nmodel: {context_tokens: 10000000}\ntools: [{name: t}]\nx-big: &b " + "v" * 100_000
    big_state += "\nstate:\n" + "".join(f"  k{i}: *b\n" for i in range(38))  # 3.8M characters rendered
    (folder / "s.yaml").write_text(big_state)
    template_env = await Env.open(str(folder / "w.yaml"), backend="demo")
    state_env = await Env.open(str(folder / "s.yaml"), backend="demo")
    fork_env = await Env.open("mcp_crm", backend="demo", seed=3)
    for _ in range(10):
        await fork_env.call("search_contacts", {"query": "murphy"})
    scenarios: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("18-level $ref fan-out, arguments", lambda: fanned.call("t", {"p": 1})),
        ("18-level $ref fan-out, answer (3 attempts)", lambda: fanned.call("t", {"p": "ok"})),
        ("4,000 unique objects", lambda: unique.call("t", {"a": objects})),
        ("4 MB format: regex argument", lambda: regex.call("t", {"r": alternation})),
        ("1.2 MB template, a session's first call", lambda: template_env.call("t", {})),
        ("3.8M-character state, a session's first call", lambda: state_env.call("t", {})),
        ("Env.fork(10**5) (refused)", lambda: fork_env.fork(10**5)),
        ("Env.fork(256)", lambda: fork_env.fork(256)),
    ]
    print(f"{'former stall':48} {'took':>8} {'longest ping wait':>18}")
    for name, work in scenarios:
        took, lag = await lag_during(work)
        print(f"{name:48} {took:7.2f}s {lag * 1000:15.0f} ms")
    for env in (template_env, state_env, fork_env):
        await env.close()


if __name__ == "__main__":
    anyio.run(main)
