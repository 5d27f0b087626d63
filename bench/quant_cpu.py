"""CPU benchmark of GGUF weights kept in blocks (not a test): per type, `quant_matmul`'s CPU path (row chunks
dequantized, then multiplied) on a 2048 x 2048 weight at T=1 and T=8, against `F.linear` on the same weight in fp32,
plus `dequantize` of the whole weight alone. Medians of several runs.

    .venv/bin/python bench/quant_cpu.py [--threads 2] [--runs 15] [--size 2048]

The fp32 weight (16 MiB) fits the 32 MiB L3 of the 2-core box, so `F.linear` runs from cache here; a model's weights
do not, which makes the ratios below an upper bound of the real cost of keeping weights in blocks.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from engine.kernels.dequantize.reference import dequantize
from engine.kernels.quant_matmul.reference import quant_matmul
from engine.quant.formats import GGMLType
from engine.testing.quant_recipe import random_blocks

KINDS = (GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.IQ4_XS, GGMLType.MXFP4)


def _median_ms(runs: int, fn: Callable[[], object]) -> float:
    fn()  # warm-up: allocator, caches, tables
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _load_average() -> str:
    """Other processes on the CPUs skew 2-thread timings badly (every parallel op waits for its slowest thread)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--size", type=int, default=2048)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = args.size
    print(f"{size} x {size} weight, {args.threads} threads, load average {_load_average()}")
    print(f"{'type':8s} {'dequant ms':>10s} {'ns/weight':>9s}", end="")
    for tokens in (1, 8):
        print(f" | {'T=' + str(tokens) + ' ms':>9s} {'fp32 ms':>8s} {'ratio':>6s}", end="")
    print()
    weight32 = torch.randn(size, size) / size**0.5
    xs = {tokens: torch.randn(tokens, size) for tokens in (1, 8)}
    linear_ms = {tokens: _median_ms(args.runs, lambda x=x: F.linear(x, weight32)) for tokens, x in xs.items()}
    for kind in KINDS:
        blocks = random_blocks((size, size), kind, seed=int(kind))
        dequant_ms = _median_ms(args.runs, lambda b=blocks, k=kind: dequantize(b, k, size))
        print(f"{kind.name:8s} {dequant_ms:10.2f} {dequant_ms * 1e6 / size**2:9.2f}", end="")
        for tokens, x in xs.items():
            ms = _median_ms(args.runs, lambda x=x, b=blocks, k=kind: quant_matmul(x, b, k, size))
            print(f" | {ms:9.2f} {linear_ms[tokens]:8.2f} {ms / linear_ms[tokens]:6.1f}", end="")
        print(flush=True)
    print(f"load average after: {_load_average()}")


if __name__ == "__main__":
    main()
