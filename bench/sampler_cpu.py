"""The batched sampler (engine/sampling.sample_tokens) against the per-row sampler it replaced, on a CPU, at the real
vocabulary (248,320 ids) and batch 32, both measured in this run: the ratio old / new per sampling setting.

    python bench/sampler_cpu.py                 # b32 x 248,320, best of 3
    python bench/sampler_cpu.py --batch 8 --repeats 5

The old sampler is what pick_tokens ran before: the repetition penalty row by row (a boolean index), one argmax
for the greedy rows, then per sampled row a softmax, top-k, a full sort of the vocabulary for top-p and a
multinomial draw with a host read each (the reference kept in engine/sampling.py). On a GPU the difference is
larger still (one launch sequence and one host read instead of ~10 launches and a sync per row); gpu_check times it
there ("sampler" row)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine.sampling import (  # noqa: E402
    RowSampling,
    SamplingParams,
    apply_repetition_penalty,
    make_generator,
    sample_token,
    sample_tokens,
)

VOCAB = 248_320
SETTINGS = {
    "checkpoint defaults (t 0.6, top-k 20, top-p 0.95)": SamplingParams(
        temperature=0.6, top_k=20, top_p=0.95
    ),
    "defaults + repetition penalty 1.05": SamplingParams(
        temperature=0.6, top_k=20, top_p=0.95, repetition_penalty=1.05
    ),
    "top-p 0.9 only (no top-k)": SamplingParams(temperature=1.0, top_p=0.9),
    "min-p 0.05, temperature 0.8": SamplingParams(temperature=0.8, min_p=0.05),
    "temperature 1.0 only": SamplingParams(temperature=1.0),
    "greedy + repetition penalty 1.1": SamplingParams(temperature=0, repetition_penalty=1.1),
}


def old_sampler(
    logits: torch.Tensor, rows: list[RowSampling], generators: list[torch.Generator]
) -> list[int]:
    """pick_tokens' sampling before the batched sampler, row by row."""
    logits = (
        logits.clone()
    )  # the old code penalized in place; the clone keeps every repeat on the same logits
    for i, row in enumerate(rows):
        if row.params.repetition_penalty != 1.0:
            apply_repetition_penalty(logits[i], row.seen, row.params.repetition_penalty)
    greedy = logits.argmax(-1).tolist() if any(row.params.greedy for row in rows) else None
    return [
        greedy[i] if row.params.greedy else sample_token(logits[i], row.params, generators[i])
        for i, row in enumerate(rows)
    ]


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(args.batch, args.vocab, generator=gen) * 3.0
    logits[:, 248_077:] = float("-inf")  # the padded ids past the tokenizer, as the engine masks them
    seen = [
        torch.rand(args.vocab, generator=gen) < 0.002 for _ in range(args.batch)
    ]  # ~500 prompt/output ids
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {args.batch} x vocab {args.vocab:,}; "
        f"best of {args.repeats}"
    )
    print(f"{'setting':<52}{'old ms':>10}{'new ms':>10}{'old/new':>9}")
    for name, params in SETTINGS.items():
        rows = [RowSampling(params, make_generator(i), seen[i]) for i in range(args.batch)]
        generators = [torch.Generator().manual_seed(i) for i in range(args.batch)]
        old = best_ms(lambda rows=rows, g=generators: old_sampler(logits, rows, g), args.repeats)
        new = best_ms(lambda rows=rows: sample_tokens(logits, rows), args.repeats)
        print(f"{name:<52}{old:>10.1f}{new:>10.1f}{old / new:>8.1f}x", flush=True)


if __name__ == "__main__":
    main()
