"""CPU benchmark of schema-constrained decoding (not a test): decode tok/s at batch 8 with and without the grammar
mask on the scaled model of bench/engine_cpu.py (2 threads, fp32), and the grammar compile time per schema (first
use, then cached). Baseline: the same 8 requests without a schema, measured in the same run.

    .venv/bin/python bench/structured_cpu.py [--flush-denormal]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import BENCH_CONFIG, _load_average  # noqa: E402 -- the benchmarks share one model

from engine.testing.bounded import SAMPLE_SCHEMA as SCHEMA  # noqa: E402

TOKENS = 48


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flush-denormal", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)
    from engine import LLM, SamplingParams
    from engine.testing.tiny_checkpoint import make_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_checkpoint(tmp, seed=0, **BENCH_CONFIG)
        llm = LLM(
            path.as_posix(), device="cpu", progress=False, enable_prefix_caching=False, max_model_len=1024
        )
    start = time.perf_counter()
    llm.compile_schema(SCHEMA)
    first = time.perf_counter() - start
    start = time.perf_counter()
    llm.compile_schema(SCHEMA)
    cached = time.perf_counter() - start
    prompts = [[5 + i, 9, 13, 2, 40 + i] for i in range(8)]

    def decode_rate(schema: dict | None) -> float:
        def run(tokens: int) -> tuple[float, int]:
            params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, json_schema=schema)
            start = time.perf_counter()
            outs = llm.generate(prompts, params)
            # a constrained answer may end before max_tokens (its grammar closed): count what was generated
            return time.perf_counter() - start, sum(len(o.outputs[0].token_ids) for o in outs)

        run(4)
        # decode time = generate(n + 1) - generate(1): removes the prefill and the first sampled token
        long_runs, short_runs = [run(TOKENS + 1) for _ in range(2)], [run(1) for _ in range(2)]
        (long_s, long_n), (short_s, short_n) = min(long_runs), min(short_runs)
        if long_n < len(prompts) * (TOKENS + 1):
            print(
                f"    ({'constrained' if schema else 'free'}: {long_n} tokens generated, some answers closed early)"
            )
        return (long_n - short_n) / (long_s - short_s)

    free = decode_rate(None)
    constrained = decode_rate(SCHEMA)
    llm.shutdown()
    print(f"threads {args.threads}, flush denormals {args.flush_denormal}, load average {_load_average()}")
    print(f"grammar compile: first use {first * 1e3:.1f} ms, cached {cached * 1e6:.0f} us")
    print(
        f"decode batch 8: free {free:.1f} tok/s, constrained {constrained:.1f} tok/s: constrained/free = "
        f"{constrained / free:.2f}x (target >= 0.90x)"
    )


if __name__ == "__main__":
    main()
