"""CPU benchmark: our engine on a GGUF model's Q4_K_M file vs the same model's F32 file (not a test).

Baseline: our engine on the F32 twin (the Q4_K_M weights dequantized by llama.cpp's own numpy code, so both files
hold the same model). The issue's bar: decode at batch 1 and 8 from the Q4_K_M file >= 0.5x the F32 file. When
llama-cpp-python is importable, llama.cpp's own CPU decode tok/s on the same two files is printed beside them for
context (batch 1; llama.cpp quantizes activations in its quantized matmuls).

Model: 8 layers (6 Gated DeltaNet + 2 attention), hidden 1024, 64 experts top-8, expert intermediate 256,
vocab 32000 (every row length a multiple of 256, as K-quants need), random weights of llama.cpp's Q4_K_M recipe
(`engine/testing/quant_recipe.py`), 2 threads.

    .venv/bin/python bench/gguf_cpu.py [--decode-tokens 32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from engine_cpu import _best_of  # bench/ is the script's folder: the same timing rule as engine_cpu.py

BENCH_CONFIG = dict(
    num_hidden_layers=8,
    hidden_size=1024,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=128,
    linear_num_key_heads=8,
    linear_num_value_heads=16,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    num_experts=64,
    num_experts_per_tok=8,
    moe_intermediate_size=256,
    shared_expert_intermediate_size=256,
    vocab_size=32000,
    max_position_embeddings=4096,
)


def _llama_cpp_decode(path: Path, prompt: list[int], tokens: int, threads: int) -> float | None:
    try:
        import llama_cpp
    except ImportError:
        return None
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=threads, n_batch=64, verbose=False)

    def run(n: int) -> None:
        llm.reset()
        llm.eval(prompt)
        for _ in range(n):
            llm.eval([int(llm.scores[llm.n_tokens - 1].argmax())])

    run(2)
    return tokens / (_best_of(2, lambda: run(tokens)) - _best_of(2, lambda: run(0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # random decays drive DeltaNet states subnormal (slow x86 floats) in both

    from engine import LLM, SamplingParams
    from engine.config import Config
    from engine.testing.gguf_model_file import write_random_pair
    from engine.testing.tiny_checkpoint import build_tokenizer

    config = Config(**BENCH_CONFIG)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 300, (32,), generator=gen).tolist() for _ in range(8)]
    n = args.decode_tokens
    with tempfile.TemporaryDirectory() as tmp:
        quant, dense = write_random_pair(Path(tmp), config, build_tokenizer())
        sizes = {p.name: os.path.getsize(p) for p in (quant, dense)}
        rows: dict[str, dict[str, float]] = {}
        for label, path in (("F32", dense), ("Q4_K_M", quant)):
            llm = LLM(str(path), device="cpu", dtype="float32", progress=False, max_num_seqs=8,
                      max_model_len=1024, enable_prefix_caching=False)  # fmt: skip

            def generate(batch: int, tokens: int, llm: LLM = llm) -> None:
                llm.generate(
                    prompts[:batch], SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
                )

            for batch in (1, 8):
                generate(batch, 4)  # warm-up
                t = _best_of(2, lambda b=batch: generate(b, n + 1)) - _best_of(
                    2, lambda b=batch: generate(b, 1)
                )
                rows.setdefault(f"decode, batch {batch}", {})[label] = batch * n / t
            rows.setdefault("weights resident (MiB)", {})[label] = llm.memory_plan().weights / 2**20
            llm.shutdown()
        theirs = {label: _llama_cpp_decode(path, prompts[0], n, args.threads) for label, path in
                  (("F32", dense), ("Q4_K_M", quant))}  # fmt: skip

    print(
        f"\nfiles: {', '.join(f'{k} {v / 2**20:.1f} MiB' for k, v in sizes.items())}; threads {args.threads}"
    )
    print(f"{'row':26s}{'ours F32':>12s}{'ours Q4_K_M':>14s}{'Q4_K_M/F32':>12s}   (tok/s; bar: >= 0.5x)")
    for row, cells in rows.items():
        print(f"{row:26s}{cells['F32']:12.1f}{cells['Q4_K_M']:14.1f}{cells['Q4_K_M'] / cells['F32']:11.2f}x")
    if theirs["F32"] is not None:
        print(
            f"{'llama.cpp decode, batch 1':26s}{theirs['F32']:12.1f}{theirs['Q4_K_M']:14.1f}"
            f"{theirs['Q4_K_M'] / theirs['F32']:11.2f}x   (context: llama.cpp's own CPU kernels)"
        )
    else:
        print("llama.cpp: not installed here (pip install llama-cpp-python==0.3.36 to print its tok/s)")


if __name__ == "__main__":
    main()
