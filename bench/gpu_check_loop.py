"""gpu_check part: the random full-size bf16 model served by the step loop (`LLM.from_model`, CUDA graphs captured
at start-up): the engine's own graph-vs-eager check, 32 concurrent callers greedy and with the checkpoint's
default sampling, the batched sampler against the per-row one on the device, a JSON-schema constrained batch
(xgrammar), and a chat session's time to first token with the prefix cache."""

from __future__ import annotations

import threading
import time

import torch
from gpu_check_setup import TARGET, Context, build_random_model, model_config, tiny_tokenizer

DEFAULT_SAMPLING = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}  # Qwen3.5's generation_config.json
SESSION_TTFT_TARGET = 1.2  # the last call's time to first token over the first's, prefix cache on
STRUCTURED_TARGET = 0.90  # constrained decode tok/s over free, batch 8 (issue 12: at most 10% slower)


def step_loop(ctx: Context) -> None:
    from engine import LLM

    config = model_config(ctx.dry_run)
    model = build_random_model(config, ctx.device, ctx.dtype)
    tokenizer = tiny_tokenizer()
    callers, prompt_len, new_tokens = (32, 128, 128) if not ctx.dry_run else (3, 8, 4)
    start = time.perf_counter()
    llm = LLM.from_model(
        model, config, tokenizer, name="random", max_model_len=4096, max_num_seqs=callers,
        enable_prefix_caching=False,
    )  # fmt: skip
    graphs = llm.engine.runner.graph_runner.captured_sizes
    ctx.rows.info(
        "engine started",
        f"decode graphs captured for {graphs or 'none (eager)'}",
        time.perf_counter() - start,
        "s",
    )
    with ctx.rows.section("engine graph == eager"):
        for check in llm.check_cuda_graphs([1, callers]):
            ctx.rows.check(f"engine graph b{check.batch} == eager", check.ok, check.describe())
    gen = torch.Generator().manual_seed(1)
    vocab = min(len(tokenizer), config.vocab_size)
    prompts = [torch.randint(0, vocab, (prompt_len,), generator=gen).tolist() for _ in range(callers)]
    rates = {}
    for label, sampling in (("greedy", {"temperature": 0.0}), ("default sampling", DEFAULT_SAMPLING)):
        with ctx.rows.section(f"loop b{callers} {label}"):
            rates[label] = loop_rate(ctx, llm, prompts, new_tokens, sampling)
            note = "t 0.6, top-k 20, top-p 0.95 (the checkpoint's defaults)" if label != "greedy" else ""
            ctx.rows.measure(
                f"loop b{callers} {label}", rates[label], "tok/s", at_least=TARGET["loop b32"], note=note
            )
    with ctx.rows.section("loop overlap on / off"):
        overlap_rows(ctx, llm, prompts, new_tokens)
    if len(rates) == 2:
        ctx.rows.measure(
            "loop sampled / greedy", rates["default sampling"] / rates["greedy"], "x", at_least=0.95,
            note="what sampling costs the loop (the sampler is one launch sequence, one host read)",
        )  # fmt: skip
    with ctx.rows.section("sampler on the device"):
        sampler_rows(ctx, config.vocab_size, callers)
    with ctx.rows.section("structured"):
        structured_rows(ctx, llm, prompts[:8], 64 if not ctx.dry_run else 3)
    llm.shutdown()
    with ctx.rows.section("session TTFT"):
        session_rows(ctx, model, config, tokenizer)


def loop_rate(
    ctx: Context,
    llm,
    prompts: list[list[int]],
    new_tokens: int,
    sampling: dict,
    tokens_out: list | None = None,
) -> float:
    """Aggregate generated tok/s of one concurrent caller per prompt (prefill included), after a short warm-up;
    `tokens_out` gets each caller's generated token ids (in prompt order)."""
    from engine import SamplingParams

    def run_all(tokens: int) -> float:
        params = [
            SamplingParams(max_tokens=tokens, ignore_eos=True, seed=i, **sampling)
            for i in range(len(prompts))
        ]
        outputs: list = [None] * len(prompts)

        def one(i: int) -> None:
            outputs[i] = llm.generate(prompts[i], params[i])[0].outputs[0].token_ids

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - start
        if tokens_out is not None:
            tokens_out[:] = outputs
        return took

    run_all(4)  # warm-up: kernels compile, the sampler's paths run once
    return len(prompts) * new_tokens / run_all(new_tokens)


def overlap_rows(ctx: Context, llm, prompts: list[list[int]], new_tokens: int) -> None:
    """The step loop with the overlap scheduler (the default on a GPU: step k's tokens stay on the device and
    step k + 1 launches before the host reads them) against the serial loop, in the same engine: greedy tokens
    identical, and what the overlap gains."""
    engine = llm.engine
    if not engine.overlap:
        ctx.rows.skip("loop overlap on / off", "the overlap scheduler is off here (AW_OVERLAP_SCHEDULE=0)")
        return
    rates, tokens = {}, {}
    try:
        for label, on in (("on", True), ("off", False)):
            engine.overlap = on  # read at each step; the loop is idle between two runs
            tokens[label] = []
            rates[label] = loop_rate(ctx, llm, prompts, new_tokens, {"temperature": 0.0}, tokens[label])
    finally:
        engine.overlap = True
    same = tokens["on"] == tokens["off"]
    differ = sum(a != b for a, b in zip(tokens["on"], tokens["off"], strict=True))
    ctx.rows.check(
        "loop overlap on == off (greedy tokens)",
        same,
        "" if same else f"{differ} of {len(prompts)} callers differ",
    )
    ctx.rows.measure(
        f"loop b{len(prompts)} overlap on / off", rates["on"] / rates["off"], "x", at_least=1.0,
        note=f"greedy, {rates['on']:.0f} vs {rates['off']:.0f} tok/s (the host's work hidden behind the device's)",
    )  # fmt: skip


def sampler_rows(ctx: Context, vocab: int, batch: int) -> None:
    """The step's sampling alone at the real vocabulary: the batched sampler vs the per-row one it replaced."""
    from engine.sampling import RowSampling, SamplingParams, make_generator, sample_token, sample_tokens

    dev = ctx.device
    logits = torch.randn(batch, vocab, device=dev) * 3.0
    params = SamplingParams(**DEFAULT_SAMPLING)
    rows = [RowSampling(params, make_generator(i)) for i in range(batch)]
    generators = [torch.Generator(device=dev).manual_seed(i) for i in range(batch)]
    new_ms = wall_ms(ctx, lambda: sample_tokens(logits, rows))
    old_ms = wall_ms(ctx, lambda: [sample_token(logits[i], params, generators[i]) for i in range(batch)])
    ctx.rows.measure(
        f"sampler b{batch} x {vocab:,}",
        new_ms,
        "ms",
        note=f"per-row sampler {old_ms:.2f} ms: {old_ms / new_ms:.1f}x (checkpoint defaults, wall clock, host reads in)",
    )


def wall_ms(ctx: Context, fn) -> float:  # noqa: ANN001
    """Best wall-clock ms of a few calls, syncs included: the host reads are the point."""
    fn()
    best = float("inf")
    for _ in range(5 if not ctx.dry_run else 1):
        ctx.sync()
        start = time.perf_counter()
        fn()
        ctx.sync()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def structured_rows(ctx: Context, llm, prompts: list[list[int]], tokens: int) -> None:
    """Batch 8 with and without the grammar mask: the rate ratio, and every constrained answer the grammar closed
    must parse and validate (the mask applied after the graph's logits)."""
    import json

    try:
        import jsonschema
        import xgrammar  # noqa: F401 -- the engine's grammar backend ([engine] extra)
    except ImportError as exc:
        ctx.rows.skip(
            "structured b8",
            f"{exc.name} is not installed here (the device image has no xgrammar, jsonschema or pydantic, and no "
            "network): write them to .whl/ with bench/gpu_wheels.sh where PyPI answers and carry .whl; "
            "bench/gpu_check.sh installs .whl/*.whl first",
        )
        return
    from engine import SamplingParams
    from engine.testing.bounded import SAMPLE_SCHEMA as SCHEMA  # the CPU benchmark's: both measure the same
    from engine.testing.bounded import bounded

    start = time.perf_counter()
    llm.compile_schema(SCHEMA)
    ctx.rows.info("grammar compile", "this tokenizer's vocabulary", (time.perf_counter() - start) * 1e3, "ms")

    def run(schema: dict | None, n: int) -> tuple[float, int, list]:
        params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, json_schema=schema)
        ctx.sync()
        start = time.perf_counter()
        outs = llm.generate(prompts, params)
        ctx.sync()
        return time.perf_counter() - start, sum(len(o.outputs[0].token_ids) for o in outs), outs

    rates = {}
    for label, schema in (("free", None), ("constrained", SCHEMA)):
        run(schema, 4)  # warm-up
        # decode rate = (generate(n + 1) - generate(1)): the prefill and the first token cancel out
        (long_s, long_n, _), (short_s, short_n, _) = run(schema, tokens + 1), run(schema, 1)
        rates[label] = (long_n - short_n) / max(long_s - short_s, 1e-9)
    _, _, outs = run(bounded(SCHEMA), 256)
    invalid = []
    for out in (o.outputs[0] for o in outs):
        try:
            if out.finish_reason != "stop":
                raise ValueError(f"not closed within 256 tokens: {out.text[:80]!r}")
            jsonschema.validate(json.loads(out.text), SCHEMA)
        except (ValueError, jsonschema.ValidationError) as exc:
            invalid.append(str(exc).splitlines()[0])
    ctx.rows.check(
        f"structured b{len(prompts)} answers valid",
        not invalid,
        "; ".join(invalid[:2]),
        len(outs) - len(invalid),
        f"/ {len(outs)}",
    )
    ratio = rates["constrained"] / rates["free"]
    ctx.rows.measure(
        f"structured b{len(prompts)} constrained / free", ratio, "x", at_least=STRUCTURED_TARGET,
        note=f"free {rates['free']:,.0f} tok/s, constrained {rates['constrained']:,.0f} tok/s",
    )  # fmt: skip


def session_rows(ctx: Context, model, config, tokenizer) -> None:
    """A chat session through the prefix cache: the last call's time to first token over the first's."""
    from engine import LLM, SamplingParams

    calls = 3 if ctx.dry_run else 10
    llm = LLM.from_model(model, config, tokenizer, name="random", max_model_len=16384, max_num_seqs=4)
    words = "tool world model observation action file directory result status error".split()
    system = " ".join(words[i % len(words)] for i in range(12 if ctx.dry_run else 700))
    conversation = [{"role": "system", "content": system}]
    params = SamplingParams(temperature=0, max_tokens=3 if ctx.dry_run else 32, ignore_eos=True)
    ttfts: list[tuple[int, int, float]] = []
    llm.generate([1, 2, 3], SamplingParams(max_tokens=2))
    try:
        for k in range(calls):
            conversation.append(
                {"role": "user", "content": f'Action: {{"name": "read", "arguments": {{"n": {k}}}}}'}
            )
            prompt = llm.encode(llm.render_chat(conversation))
            ctx.sync()
            start = time.perf_counter()
            first, text, cached = None, "", 0
            for delta in llm.generate_stream(prompt, params):
                first = first or time.perf_counter() - start
                text, cached = text + delta.text, delta.num_cached_tokens
            ttfts.append((len(prompt), cached, first))
            conversation.append({"role": "assistant", "content": text.strip() or "(empty)"})
    finally:
        llm.shutdown()
    (first_len, _, first_ttft), (last_len, last_cached, last_ttft) = ttfts[0], ttfts[-1]
    ctx.rows.measure(
        f"session call {calls} TTFT / call 1",
        last_ttft / first_ttft,
        "x",
        at_most=SESSION_TTFT_TARGET,
        note=f"call 1: {first_len} tokens, {first_ttft * 1e3:.1f} ms; call {calls}: {last_len} tokens "
        f"({last_cached} cached), {last_ttft * 1e3:.1f} ms",
    )
