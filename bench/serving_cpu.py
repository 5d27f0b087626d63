"""CPU serving benchmark: many callers at once and multi-turn sessions on the step loop (not a test).

Same scaled-down random model as bench/engine_cpu.py (8 layers, hidden 512, 64 experts top-8, fp32, 2 threads).
Every ratio is against a baseline measured in the same run:

  (a) 8 concurrent callers of `LLM.generate`, 64 tokens each  vs  the same 8 requests one after another
  (b) 8 concurrent HTTP clients of `aw-mcp engine serve`       vs  the same 8 requests one after another
  (c) a 12-call chat session (~1,500-token system prompt): each call's time to first token with the prefix
      cache  vs  a cold prefill of the same prompt (an engine with the cache off), with the hit rate per call

(a) and (b) run with the prefix cache off, so they measure batching alone.

    .venv/bin/python bench/serving_cpu.py [--flush-denormal] [--skip-http] [--compiled]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import BENCH_CONFIG, _load_average  # noqa: E402 -- the benchmarks share one model

DECODE_TOKENS = 64
CALLERS = 8
SYSTEM_PROMPT_TOKENS = 1500


def _concurrently(fns: list[Callable[[], object]]) -> float:
    """Wall time of running every fn on its own thread, all released at once."""
    barrier = threading.Barrier(len(fns) + 1)
    errors: list[BaseException] = []

    def run(fn: Callable[[], object]) -> None:
        barrier.wait()
        try:
            fn()
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


def _one_after_another(fns: list[Callable[[], object]]) -> float:
    start = time.perf_counter()
    for fn in fns:
        fn()
    return time.perf_counter() - start


def bench_generate(path: Path, prompts: list[list[int]], compiled: bool = False) -> tuple[float, float]:
    from engine import LLM, SamplingParams

    llm = LLM(
        path.as_posix(),
        device="cpu",
        progress=False,
        max_num_seqs=CALLERS,
        enable_prefix_caching=False,
        compile_decode=compiled,
    )
    params = SamplingParams(temperature=0, max_tokens=DECODE_TOKENS, ignore_eos=True)
    calls = [lambda p=p: llm.generate(p, params) for p in prompts]
    start = time.perf_counter()
    warm_up = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    for size in range(1, len(prompts) + 1) if compiled else (1, 2):  # compiled: one graph per batch size
        llm.generate(prompts[:size], warm_up)
    if compiled:
        print(
            f"    (warm-up and compile of batch sizes 1-{len(prompts)}: "
            f"{time.perf_counter() - start:.0f} s, not counted)"
        )
    _concurrently(calls[:2])
    sequential = _one_after_another(calls)
    concurrent = _concurrently(calls)
    llm.shutdown()
    tokens = len(prompts) * DECODE_TOKENS
    return tokens / sequential, tokens / concurrent


def bench_http(path: Path, prompts: list[str], threads: int, compiled: bool = False) -> tuple[float, float]:
    port = 18000 + os.getpid() % 1000 + (1 if compiled else 0)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "AW_COMPILE": "1" if compiled else "0"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aw_mcp",
            "engine",
            "serve",
            "--model",
            path.as_posix(),
            "--port",
            str(port),
            "--device",
            "cpu",
            "--max-num-seqs",
            str(CALLERS),
            "--no-enable-prefix-caching",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("aw-mcp engine serve did not start")
            time.sleep(0.2)
        body = {
            "temperature": 0,
            "max_tokens": DECODE_TOKENS,
            "ignore_eos": True,
            "chat_template_kwargs": {"enable_thinking": False},
        }

        def ask(prompt: str) -> None:
            reply = httpx.post(
                f"{url}/v1/chat/completions",
                json={**body, "messages": [{"role": "user", "content": prompt}]},
                timeout=600,
            )
            reply.raise_for_status()
            assert reply.json()["usage"]["completion_tokens"] == DECODE_TOKENS

        calls = [lambda p=p: ask(p) for p in prompts]
        start = time.perf_counter()
        for size in range(1, len(calls) + 1) if compiled else (2,):  # compiled: one graph per batch size
            _concurrently(calls[:size])
        if compiled:
            print(
                f"    (warm-up and compile of batch sizes 1-{len(calls)}: {time.perf_counter() - start:.0f} s)"
            )
        sequential = _one_after_another(calls)
        concurrent = _concurrently(calls)
    finally:
        server.terminate()
        server.wait(30)
    tokens = len(prompts) * DECODE_TOKENS
    return tokens / sequential, tokens / concurrent


def bench_session(path: Path, calls: int) -> list[tuple[int, int, float, float]]:
    """(prompt tokens, cached tokens, TTFT with the cache, TTFT cold) per call."""
    from engine import LLM, SamplingParams

    warm = LLM(path.as_posix(), device="cpu", progress=False, max_model_len=8192)
    cold = LLM(path.as_posix(), device="cpu", progress=False, max_model_len=8192, enable_prefix_caching=False)
    words = "tool world model observation action file directory result status error".split()
    system = "You simulate a file-system tool server."
    while len(warm.encode(system)) < SYSTEM_PROMPT_TOKENS:
        system += " " + " ".join(words)
    conversation = [{"role": "system", "content": system}]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)

    def ttft(llm: LLM, prompt: list[int]) -> tuple[float, str, int]:
        start = time.perf_counter()
        first, text, cached = None, "", 0
        for delta in llm.generate_stream(prompt, params):
            first = first or time.perf_counter() - start
            text += delta.text
            cached = delta.num_cached_tokens
        return first, text, cached

    cold.generate("warm up", SamplingParams(max_tokens=2))
    warm.generate("warm up", SamplingParams(max_tokens=2))
    rows = []
    for k in range(calls):
        conversation.append(
            {
                "role": "user",
                "content": f'Action: {{"name": "read_file", "arguments": {{"path": "/srv/{k}.txt"}}}}',
            }
        )
        prompt = warm.encode(warm.render_chat(conversation))
        t_warm, observation, cached = ttft(warm, prompt)
        t_cold, _, _ = ttft(cold, prompt)
        rows.append((len(prompt), cached, t_warm, t_cold))
        conversation.append({"role": "assistant", "content": observation.strip() or "(empty)"})
    warm.shutdown()
    cold.shutdown()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flush-denormal", action="store_true", help="as in bench/engine_cpu.py")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--compiled", action="store_true", help="(a) and (b) also with compiled CPU decode")
    parser.add_argument("--session-calls", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush_denormal)
    from engine.testing.tiny_checkpoint import make_tiny_checkpoint

    gen = torch.Generator().manual_seed(0)
    token_prompts = [torch.randint(0, 300, (32,), generator=gen).tolist() for _ in range(CALLERS)]
    text_prompts = [f"Action {i}: list the files of /srv/data/{i} and count them" for i in range(CALLERS)]
    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_checkpoint(tmp, seed=0, max_position_embeddings=8192, **BENCH_CONFIG)
        print(
            f"threads {args.threads}, flush denormals {args.flush_denormal}, load average {_load_average()}"
        )
        for compiled in (False, True) if args.compiled else (False,):
            label = "compiled decode (AW_COMPILE=1)" if compiled else "eager"
            print(
                f"\n(a) {CALLERS} callers x {DECODE_TOKENS} tokens via LLM.generate, {label}, prefix cache off"
            )
            seq_tps, conc_tps = bench_generate(path, token_prompts, compiled)
            print(
                f"    one after another {seq_tps:7.1f} tok/s   concurrent {conc_tps:7.1f} tok/s   "
                f"ratio {conc_tps / seq_tps:.2f}x (target >= 2.5x)"
            )
        for compiled in ((False, True) if args.compiled else (False,)) if not args.skip_http else ():
            label = "compiled decode (AW_COMPILE=1)" if compiled else "eager"
            print(
                f"\n(b) {CALLERS} HTTP clients x {DECODE_TOKENS} tokens through aw-mcp engine serve, {label}"
            )
            seq_tps, conc_tps = bench_http(path, text_prompts, args.threads, compiled)
            print(
                f"    one after another {seq_tps:7.1f} tok/s   concurrent {conc_tps:7.1f} tok/s   "
                f"ratio {conc_tps / seq_tps:.2f}x (target >= 2x)"
            )
        rows = bench_session(path, args.session_calls)
    print(
        f"\n(c) {args.session_calls}-call chat session: time to first token, prefix cache vs cold prefill "
        "(target <= 0.35x)"
    )
    print(
        f"    {'call':>4s} {'prompt':>7s} {'cached':>7s} {'hit':>6s} {'ttft cached':>12s} {'ttft cold':>10s} "
        f"{'ratio':>7s}"
    )
    for k, (tokens, cached, t_warm, t_cold) in enumerate(rows, 1):
        print(
            f"    {k:4d} {tokens:7d} {cached:7d} {cached / tokens:6.1%} {t_warm * 1e3:10.0f}ms "
            f"{t_cold * 1e3:8.0f}ms {t_warm / t_cold:6.2f}x"
        )
    later = rows[1:]
    print(
        f"    calls 2..{len(rows)}: worst ratio {max(w / c for _, _, w, c in later):.2f}x, "
        f"hit rate {sum(c for _, c, _, _ in later) / sum(t for t, _, _, _ in later):.1%}"
    )


if __name__ == "__main__":
    main()
