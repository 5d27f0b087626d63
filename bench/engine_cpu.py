"""CPU benchmark: our engine vs transformers on the same scaled-down random Qwen3.5-MoE (not a test).

Model: 8 layers (6 Gated DeltaNet + 2 attention), hidden 512, 64 experts top-8, expert intermediate 128,
vocab 32000, fp32, 2 threads. Rows: prefill tok/s (one 512-token prompt), decode tok/s at batch 1 and batch 8.

    .venv/bin/python bench/engine_cpu.py [--decode-tokens 32] [--flush-denormal] [--no-compile]

Ours runs twice on the same weights: eager (the default engine) and with `LLM(compile_decode=True)` (AW_COMPILE=1:
CPU decode through torch.compile'd per-layer regions); the compiled engine's first decode at each batch size
(compile + warm-up) is timed separately and printed, not counted. Prefill is the same code in both.
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
        "--no-compile", action="store_true", help="skip our compiled-decode engine (eager column only)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)

    from transformers import Qwen3_5MoeForCausalLM

    from engine import LLM, SamplingParams
    from engine.testing.tiny_checkpoint import make_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_checkpoint(tmp, seed=0, **BENCH_CONFIG)
        engines = {
            name: LLM(
                path.as_posix(),
                device="cpu",
                dtype="float32",
                progress=False,
                max_num_seqs=8,
                max_model_len=1024,
                compile_decode=compiled,
                enable_prefix_caching=False,  # repeated prompts would hit the cache: measure compute only
            )
            for name, compiled in (("eager", False), ("compiled", True))
            if not (compiled and args.no_compile)
        }
        hf = Qwen3_5MoeForCausalLM.from_pretrained(path.as_posix(), dtype=torch.float32).eval()

    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 300, (args.prompt_tokens,), generator=gen)
    short = [torch.randint(0, 300, (32,), generator=gen) for _ in range(8)]
    n = args.decode_tokens

    def ours_generate(ours: LLM, prompts: list[torch.Tensor], tokens: int) -> None:
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

    rows: list[tuple[str, dict[str, float], float]] = []  # (row, {engine: tok/s}, transformers tok/s)
    warmup_seconds: dict[int, float] = {}
    eager = engines["eager"]
    ours_generate(eager, [prompt], 1), hf_prefill()  # warm-up
    t_ours = _best_of(2, lambda: ours_generate(eager, [prompt], 1))
    t_hf = _best_of(2, hf_prefill)
    # Prefill runs the same eager code in both engines: one measurement.
    rows.append(
        ("prefill 512 tok, batch 1", {"eager": args.prompt_tokens / t_ours}, args.prompt_tokens / t_hf)
    )
    for batch in (1, 8):
        prompts = short[:batch]
        mine: dict[str, float] = {}
        for name, ours in engines.items():
            start = time.perf_counter()
            ours_generate(ours, prompts, 4)  # warm-up (compiled: compiles this batch size's regions)
            if name == "compiled":
                warmup_seconds[batch] = time.perf_counter() - start
            # decode time = generate(n + 1) - generate(1): removes the prefill and the first sampled token
            t_ours = _best_of(2, lambda o=ours, p=prompts: ours_generate(o, p, n + 1)) - _best_of(
                2, lambda o=ours, p=prompts: ours_generate(o, p, 1)
            )
            mine[name] = batch * n / t_ours
        hf_generate(prompts, 4)
        t_hf = _best_of(2, lambda p=prompts: hf_generate(p, n + 1)) - _best_of(
            2, lambda p=prompts: hf_generate(p, 1)
        )
        rows.append((f"decode, batch {batch}", mine, batch * n / t_hf))

    if warmup_seconds:
        print(
            "\nours compiled, first 4-token generate (compile + warm-up, not counted): "
            + ", ".join(f"batch {b} {s:.1f} s" for b, s in warmup_seconds.items())
        )
    print(
        f"\nthreads {args.threads}, flush denormals {args.flush_denormal} (both engines), "
        f"load average {_load_average()}"
    )
    names = list(engines)
    header = f"{'row':26s}" + "".join(f"{'ours ' + k:>15s}" for k in names) + f"{'transformers':>14s}"
    print(header + "".join(f"{k + '/transformers':>22s}" for k in names) + "   (tok/s)")
    for row, mine, theirs in rows:
        cells = "".join(f"{mine[k]:15.1f}" if k in mine else f"{'same':>15s}" for k in names)
        ratios = "".join(f"{mine.get(k, mine['eager']) / theirs:21.2f}x" for k in names)
        print(f"{row:26s}{cells}{theirs:14.1f}{ratios}")


if __name__ == "__main__":
    main()
