"""`aw-mcp bench`: run AgentWorldBench-format samples through a world model, judge them, print the paper's table.

Results go to one JSON line per sample (default DATA.results.jsonl), written and flushed as each sample finishes;
a rerun skips the samples already there, so a killed run resumes without asking for them again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from tqdm import tqdm

from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.openai import OpenAIWorldModel
from aw_mcp.backends.resolve import open_backend, resolve_backend
from aw_mcp.commands import summary
from aw_mcp.core.errors import UsageError
from aw_mcp.core.model_io import BackendError, GenerationParams
from aw_mcp.core.private_files import open_private
from aw_mcp.eval.bench import (
    Loaded,
    finished_keys,
    is_degenerate,
    load_samples,
    model_output,
    read_results,
    table,
)
from aw_mcp.eval.judging import (
    CLOSING,
    judge_one,
    judge_system_prompt,
    load_closing,
    sample_judge_user_message,
)
from aw_mcp.prompt.templates import prompt_dir
from aw_mcp.spec.world import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, ModelSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help=summary("bench"))
    parser.add_argument(
        "data",
        metavar="DATA.jsonl",
        help="samples, one JSON object per line; a line with `gen` (eval.py's predictions.jsonl) is judged as it is",
    )
    group = parser.add_argument_group("world model")
    group.add_argument(
        "--backend", choices=("openai", "local"), help="default: openai when --base-url is set"
    )
    group.add_argument("--base-url", help="the world model's OpenAI-compatible server (…/v1)")
    group.add_argument("--model", help="the world model's name (openai) or path (local)")
    group.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    group.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE)
    judge = parser.add_argument_group("judge")
    judge.add_argument("--judge-base-url", required=True, help="the judge's OpenAI-compatible server")
    judge.add_argument("--judge-model", required=True)
    judge.add_argument(
        "--prompts", metavar="DIR", help="judge prompts laid out like prompts/ (default: bundled)"
    )
    judge.add_argument(
        "--judge-closing",
        metavar="FILE",
        help="the judge message's closing request, read verbatim (e.g. eval.py's own paragraph, for its exact "
        "bytes; default: ours, same structure)",
    )
    parser.add_argument("-o", "--output", help="result lines (default: DATA.results.jsonl)")
    parser.add_argument(
        "-j", "--concurrency", type=int, default=4, help="samples in flight at once (default 4)"
    )
    parser.set_defaults(func=run)


async def _one(
    item: Loaded,
    world: WorldModel | None,
    judge: WorldModel,
    params: GenerationParams,
    judge_systems: dict[str, str],
    closing: str = CLOSING,
) -> dict[str, Any]:
    """One sample as eval.py runs it: the world model's reply content (the line's own `gen` when it has one), no
    judgement when there is none (failed), else the judge's scores for the answer as eval.py extracts it."""
    sample = item.sample
    result: dict[str, Any] = {
        "key": item.key,
        "id": sample.id,
        "domain": sample.domain,
        "turn_idx": sample.turn_idx,
    }
    content = sample.gen
    if content is None:
        if world is None:
            return {**result, "output": None, "judgement": None, "error": "no `gen` and no world model"}
        try:
            content = (await world.generate(sample.messages(), params)).text
        except BackendError as exc:
            return {**result, "output": None, "judgement": None, "error": f"world model: {exc}"}
    if not content:  # eval.py: "No model generation", counted as failed
        return {**result, "output": None, "judgement": None, "error": "the world model gave no content"}
    output = model_output(content)
    result["output"], result["degenerate"] = output, is_degenerate(output)
    user = sample_judge_user_message(sample, content, closing)
    judgement, raw = await judge_one(judge, judge_systems[sample.domain], user)
    return {
        **result,
        "judgement": judgement,
        "judge_raw": raw,
        "error": None if judgement else "no judge scores",
    }


async def _bench(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    samples = load_samples(args.data)
    output = Path(args.output) if args.output else Path(args.data).with_suffix(".results.jsonl")
    done = finished_keys(output)
    pending = [s for s in samples if s.key not in done]
    prompts = prompt_dir(args.prompts, None, None)
    closing = load_closing(args.judge_closing)
    judge_systems = {
        d: judge_system_prompt(prompts.load(d, "judge_system_prompt"), None)
        for d in {s.sample.domain for s in samples}
    }
    asks_world = any(s.sample.gen is None for s in pending)
    world = None
    if asks_world:
        choice = resolve_backend(
            ModelSettings(), backend=args.backend, base_url=args.base_url, model=args.model
        )
        world = open_backend(choice, ModelSettings())
    judge = OpenAIWorldModel(args.judge_base_url, args.judge_model)
    params = GenerationParams(temperature=args.temperature, max_tokens=args.max_tokens)
    limiter = anyio.CapacityLimiter(args.concurrency)
    lock = anyio.Lock()
    if done:
        print(
            f"resuming: {len(samples) - len(pending)} of {len(samples)} sample(s) already in {output}",
            file=sys.stderr,
        )
    try:
        with (
            open_private(output, "a") as out,  # samples and answers: owner-only
            tqdm(total=len(pending), desc="bench", unit="sample") as bar,
        ):

            async def worker(item: Loaded) -> None:
                async with limiter:
                    result = await _one(item, world, judge, params, judge_systems, closing)
                async with lock:
                    out.write(json.dumps(result, ensure_ascii=False) + "\n")
                    out.flush()
                    os.fsync(out.fileno())
                    bar.update(1)

            async with anyio.create_task_group() as group:
                for item in pending:
                    group.start_soon(worker, item)
    finally:
        if world is not None:
            await world.aclose()
        await judge.aclose()
    keys = {s.key for s in samples}
    print(table(r for r in read_results(output) if r.get("key") in keys))
    print(f"results: {output}")
    return 0


def run(args: argparse.Namespace) -> int:
    return anyio.run(_bench, args)
