"""Validity of constrained observations on the tiny random checkpoint (CPU; not a test).

Every tool with an outputSchema in the bundled worlds (`worlds/*.yaml`) and in the worlds imported from the OpenAPI
examples (the two documents of tests/importers/test_import_openapi.py and docs/examples/tasks-openapi.yaml) is called through
the real pipeline: Simulator → local backend → engine → answer parser → outputSchema validation, fast mode
(no thinking), `output_retries: 0` (an answer that is not valid is a failure, never a retry). Three modes:

- constrained: as the simulator asks (`model.constrained: true`): the tool's answer schema (the result OR the
  JSON error body), or a plain-text `Error: ` line, in the trained frame;
- result-only: the grammar of the result schema alone (no error alternatives): every answer must be a result;
- free: `model.constrained: false`, the random model's own output.

The random model never chooses to end a string, a number or a list, so the grammar's JSON Schema is capped for it
(engine/testing/bounded.py: strings of 8 characters, integers within +-10^6, 2 items, an email / hostname / URI as
a short pattern of its format; the plain-text error line at 40 characters); the answer is validated against the full, uncapped outputSchema. A real model needs no caps.

    .venv/bin/python bench/structured_validity.py [--calls 200] [--max-tokens 600] [--free-calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jsonschema

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aw_mcp.backends.local import LocalWorldModel  # noqa: E402
from aw_mcp.core.model_io import GenerationParams  # noqa: E402
from aw_mcp.load.world import load_world  # noqa: E402
from aw_mcp.prompt.constraint import ERROR_BODY_SCHEMA, error_text_regex  # noqa: E402
from aw_mcp.sim.simulator import Simulator, looks_like_error  # noqa: E402
from aw_mcp.spec.schema_check import schema_validator  # noqa: E402
from aw_mcp.spec.schema_walk import LocalRefs  # noqa: E402
from aw_mcp.spec.world import ToolSpec, WorldSpec  # noqa: E402
from engine.testing.bounded import bounded  # noqa: E402

ERROR_TEXT_CAP = 40
MODES = ("constrained", "result-only", "free")


class BoundedLocal(LocalWorldModel):
    """The local backend with the grammar capped for a random model (see the module docstring)."""

    result_only = False

    async def generate(self, messages, params: GenerationParams, on_progress=None, call=None):  # type: ignore[override]
        constraint = params.constraint
        if constraint is not None:
            if self.result_only:
                schema = constraint.json_schema["anyOf"][0]
                defs = {k: v for k, v in constraint.json_schema.items() if k in ("$defs", "definitions")}
                constraint = replace(constraint, json_schema={**schema, **defs}, text_alternative=None)
            else:
                constraint = replace(constraint, text_alternative=error_text_regex(ERROR_TEXT_CAP))
            constraint = replace(constraint, json_schema=bounded(constraint.json_schema))
            params = replace(params, constraint=constraint)
        return await super().generate(messages, params, on_progress, call)


def structured_worlds() -> list[WorldSpec]:
    """The bundled worlds and the imported OpenAPI examples."""
    from aw_mcp.importers.import_log import ImportLog
    from aw_mcp.importers.openapi import import_openapi
    from tests.importers.test_import_openapi import ORDERS_31, PETSTORE_30

    worlds = [load_world(path) for path in sorted((ROOT / "worlds").glob("*.yaml"))]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "petstore.yaml").write_text(PETSTORE_30)
        (Path(tmp) / "orders.json").write_text(json.dumps(ORDERS_31))
        for source in (
            Path(tmp) / "petstore.yaml",
            Path(tmp) / "orders.json",
            ROOT / "docs/examples/tasks-openapi.yaml",
        ):
            worlds.append(WorldSpec.model_validate(import_openapi(source, ImportLog())[0]))
    return worlds


def example_value(schema: Any, refs: LocalRefs | None = None) -> Any:
    """A small value valid for a simple input schema (enough for the tools here without examples); local `$ref`s
    (an imported world's shared `$defs`) resolved against the root schema."""
    if refs is None:
        refs = LocalRefs(schema)
    if not isinstance(schema, dict):
        return "x"
    if isinstance(schema.get("$ref"), str):
        return example_value(refs.get(schema["$ref"], {}), refs)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("examples"):
        return schema["examples"][0]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("oneOf", "anyOf"):
        if schema.get(key):
            return example_value(schema[key][0], refs)
    kind = schema.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        required = schema.get("required", [])
        return {name: example_value(schema.get("properties", {}).get(name, {}), refs) for name in required}
    if kind in ("integer", "number"):
        return max(1, schema.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    return "x" * max(1, schema.get("minLength", 1))


def call_arguments(tool: ToolSpec) -> dict[str, Any]:
    arguments = tool.examples[0].arguments if tool.examples else example_value(tool.inputSchema)
    problems = tool.argument_problems(arguments)
    if problems:
        raise SystemExit(f"no valid arguments for {tool.name}: {problems}")
    return arguments


@dataclass
class Target:
    world: WorldSpec
    tool: ToolSpec
    arguments: dict[str, Any]


def targets() -> list[Target]:
    return [
        Target(world, tool, call_arguments(tool))
        for world in structured_worlds()
        for tool in world.tools
        if tool.outputSchema is not None
    ]


def classify(tool: ToolSpec, outcome: Any) -> str:
    """result: validates the full outputSchema (checked here again with jsonschema); error-json / error-text: an
    error the simulator recognised, JSON valid for the error body schema or an `Error: ` line; else invalid."""
    record = outcome.record
    if record is None or record.error is not None or record.attempts != 1:
        return "invalid"
    if not outcome.is_error:
        if outcome.structured is not None and not list(
            schema_validator(tool.outputSchema).iter_errors(outcome.structured)
        ):
            return "result"
        return "invalid"
    observation = record.observation or ""
    try:
        value = json.loads(observation)
    except json.JSONDecodeError:
        return (
            "error-text" if looks_like_error(observation) and observation.startswith("Error: ") else "invalid"
        )
    return (
        "error-json"
        if looks_like_error(observation)
        and jsonschema.Draft202012Validator(ERROR_BODY_SCHEMA).is_valid(value)
        else "invalid"
    )


async def run_mode(
    backend: BoundedLocal,
    plan: list[Target],
    mode: str,
    max_tokens: int,
    verbose: bool = False,
    template: str | None = None,
) -> tuple[Counter[str], int]:
    backend.result_only = mode == "result-only"
    simulators: dict[int, Simulator] = {}
    counts: Counter[str] = Counter()
    generated = 0
    for i, target in enumerate(plan):
        sim = simulators.get(id(target.world))
        if sim is None:
            settings = target.world.model.model_copy(
                update={
                    "thinking": False,
                    "max_tokens": max_tokens,
                    "output_retries": 0,
                    "constrained": mode != "free",
                }
            )
            # A fixed clock: every call of a world shares its system prompt (the engine's prefix cache).
            now = target.world.now or "2026-03-02T10:00:00Z"
            world = target.world.model_copy(update={"model": settings, "seed": 11, "now": now})
            sim = simulators[id(target.world)] = Simulator(world, backend, template=template)
        outcome = await sim.call(target.tool.name, target.arguments, session_key=f"{mode}-{i}")
        kind = classify(sim.world.tool(target.tool.name) or target.tool, outcome)
        counts[kind] += 1
        if kind == "invalid" and verbose and mode != "free":
            record = outcome.record
            print(
                f"  invalid: {target.tool.name}: {record.error if record else outcome.text}", file=sys.stderr
            )
            print(f"    raw: {(record.raw if record else '')[:400]!r}", file=sys.stderr)
        generated += 1
    return counts, generated


def report(mode: str, counts: Counter[str], total: int, seconds: float) -> str:
    valid = total - counts["invalid"]
    parts = ", ".join(
        f"{k} {counts[k]}" for k in ("result", "error-json", "error-text", "invalid") if counts[k]
    )
    return f"{mode:12} {valid:4d}/{total} valid ({valid / total:6.1%}) with 0 retries  [{parts}]  {seconds:6.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--calls", type=int, default=200, help="calls per mode, spread round-robin over the tools"
    )
    parser.add_argument("--max-tokens", type=int, default=600)
    parser.add_argument(
        "--free-calls",
        type=int,
        help="calls in the free mode (default: --calls); each runs to max_tokens, as the random model never stops",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("-v", "--verbose", action="store_true", help="show each invalid constrained answer")
    args = parser.parse_args()
    import torch

    from engine.testing.tiny_checkpoint import make_tiny_checkpoint

    torch.set_num_threads(args.threads)
    plan_tools = targets()
    plan = [plan_tools[i % len(plan_tools)] for i in range(args.calls)]
    schemas = sorted({f"{t.world.name}/{t.tool.name}" for t in plan_tools})
    print(f"{len(schemas)} output schemas: {', '.join(schemas)}")
    wrapped = [f"{t.tool.name} ({t.tool.outputWrapper})" for t in plan_tools if t.tool.outputWrapper]
    print(f"with outputWrapper (the model writes the unwrapped value): {', '.join(wrapped)}")
    print(
        f"{args.calls} calls per mode, max_tokens {args.max_tokens}, fast mode, output_retries 0; grammar capped for "
        f"the random model (strings 8 chars, integers +-10^6, 2 items, "
        f"email/hostname/uri short patterns, error line {ERROR_TEXT_CAP} chars), answers "
        "validated against the full outputSchema"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_checkpoint(tmp, seed=0)
        backend = BoundedLocal(str(path), device="cpu")
        asyncio.run(backend.preload())
        for mode in args.modes.split(","):
            start = time.perf_counter()
            calls = plan[: args.free_calls] if mode == "free" and args.free_calls is not None else plan
            counts, total = asyncio.run(run_mode(backend, calls, mode, args.max_tokens, args.verbose))
            print(report(mode, counts, total, time.perf_counter() - start), flush=True)
        asyncio.run(backend.aclose())


if __name__ == "__main__":
    main()
