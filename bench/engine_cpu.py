"""CPU benchmark: our engine vs transformers on the same scaled-down random Qwen3.5-MoE (not a test).

Model: 8 layers (6 Gated DeltaNet + 2 attention), hidden 512, 64 experts top-8, expert intermediate 128,
vocab 32000, fp32, 2 threads. Rows: prefill tok/s (one 512-token prompt), decode tok/s at batch 1 and batch 8.

    .venv/bin/python bench/engine_cpu.py [--decode-tokens 32] [--flush-denormal] [--compile]

`--compile` runs our decode batches' experts through the torch.compile'd gathered kernel
(`LLM(compile_decode=True)`); its compile time (first decode at each batch size) is printed separately.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

import torch

BENCH_CONFIG = dict(
    num_hidden_layers=8,
    hidden_size=512,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=128,
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    num_experts=64,
    num_experts_per_tok=8,
    moe_intermediate_size=128,
    shared_expert_intermediate_size=128,
    vocab_size=32000,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10_000_000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [6, 5, 5],
        "mrope_interleaved": True,
    },
)


def _best_of(runs: int, fn: Callable[[], None]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _load_average() -> str:
    """Other processes on the CPUs skew 2-thread timings badly (every parallel op waits for its slowest thread)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--flush-denormal",
        action="store_true",
        help="flush subnormal floats to zero (both engines): the random model's fast decays drive DeltaNet "
        "states subnormal, which makes x86 float ops very slow",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="our engine only: LLM(compile_decode=True), compile time reported",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)

    from transformers import Qwen3_5MoeForCausalLM

    from engine import LLM, SamplingParams
    from engine.testing.tiny_checkpoint import make_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_checkpoint(tmp, seed=0, **BENCH_CONFIG)
        ours = LLM(
            path.as_posix(),
            device="cpu",
            dtype="float32",
            progress=False,
            max_num_seqs=8,
            max_model_len=1024,
            compile_decode=args.compile,
        )
        hf = Qwen3_5MoeForCausalLM.from_pretrained(path.as_posix(), dtype=torch.float32).eval()

    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 300, (args.prompt_tokens,), generator=gen)
    short = [torch.randint(0, 300, (32,), generator=gen) for _ in range(8)]
    n = args.decode_tokens

    def ours_generate(prompts: list[torch.Tensor], tokens: int) -> None:
        params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
        ours.generate([p.tolist() for p in prompts], params)

    def hf_generate(prompts: list[torch.Tensor], tokens: int) -> None:
        with torch.no_grad():
            hf.generate(
                torch.stack(prompts),
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                pad_token_id=0,
            )

    def hf_prefill() -> None:
        with torch.no_grad():
            hf(input_ids=prompt[None], logits_to_keep=1)

    rows = []
    warmup_seconds: dict[int, float] = {}
    ours_generate([prompt], 1), hf_prefill()  # warm-up
    t_ours = _best_of(2, lambda: ours_generate([prompt], 1))
    t_hf = _best_of(2, hf_prefill)
    rows.append(("prefill 512 tok, batch 1", args.prompt_tokens / t_ours, args.prompt_tokens / t_hf))
    for batch in (1, 8):
        prompts = short[:batch]
        start = time.perf_counter()
        ours_generate(prompts, 4)  # warm-up (with --compile: compiles this batch size's decode experts)
        warmup_seconds[batch] = time.perf_counter() - start
        hf_generate(prompts, 4)
        # decode time = generate(n + 1) - generate(1): removes the prefill and the first sampled token
        t_ours = _best_of(2, lambda p=prompts: ours_generate(p, n + 1)) - _best_of(
            2, lambda p=prompts: ours_generate(p, 1)
        )
        t_hf = _best_of(2, lambda p=prompts: hf_generate(p, n + 1)) - _best_of(
            2, lambda p=prompts: hf_generate(p, 1)
        )
        rows.append((f"decode, batch {batch}", batch * n / t_ours, batch * n / t_hf))

    if args.compile:
        print(
            "\nours with --compile, first 4-token generate (compile + warm-up): "
            + ", ".join(f"batch {b} {s:.1f} s" for b, s in warmup_seconds.items())
        )
    print(
        f"\nthreads {args.threads}, flush denormals {args.flush_denormal} (both engines), "
        f"load average {_load_average()}"
    )
    print(f"{'row':28s} {'ours tok/s':>12s} {'transformers tok/s':>20s} {'ours/transformers':>18s}")
    for name, mine, theirs in rows:
        print(f"{name:28s} {mine:12.1f} {theirs:20.1f} {mine / theirs:17.2f}x")


if __name__ == "__main__":
    main()
