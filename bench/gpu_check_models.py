"""gpu_check parts on the whole model with random weights: bf16 decode (b1/b32 CUDA-graph rows, each with a
graph-vs-eager logits check, then b1 at 30k and an 8k prefill), GGUF Q4_K_M decode (b1/b4/b8/b16/b32, the same
check), and the GGUF peak memory with a 32k context (a process of its own: nothing before it is still allocated)."""

from __future__ import annotations

import time

import torch
from gpu_check_rows import figure
from gpu_check_setup import (
    GGUF_PEAK_GIB,
    PREFILL_TARGET,
    ROOFLINE,
    TARGET,
    Context,
    build_q4_k_m_model,
    build_random_model,
    context_length,
    gguf_config,
    model_config,
)


def bf16_decode(ctx: Context) -> None:
    config = model_config(ctx.dry_run)
    start = time.perf_counter()
    model = build_random_model(config, ctx.device, ctx.dtype)
    ctx.sync()
    params = sum(p.numel() for p in model.parameters())
    ctx.rows.info("bf16 model built", f"{params / 1e9:.3g} B params", time.perf_counter() - start, "s")
    batches = (1, 32) if not ctx.dry_run else (1, 3)
    for batch in batches:
        name = f"bf16 b{batch} 2k"
        with ctx.rows.section(name):
            decode_rows(
                ctx,
                name,
                model,
                config,
                batch,
                context_length(ctx, 2048),
                TARGET[f"bf16 b{32 if batch > 1 else 1}"],
            )
        ctx.free()
    with ctx.rows.section("bf16 b1 30k"):
        decode_rows(ctx, "bf16 b1 30k", model, config, 1, context_length(ctx, 30720), TARGET["bf16 b1"])
    ctx.free()
    with ctx.rows.section("bf16 prefill 8k"):
        prefill_row(ctx, model, config, 8192 if not ctx.dry_run else 24)


def gguf_decode(ctx: Context) -> None:
    config = gguf_config(ctx.dry_run)
    start = time.perf_counter()
    model, tensor_gib, quantized_gib = build_q4_k_m_model(config, ctx.device, ctx.dtype)
    ctx.sync()
    ctx.rows.info(
        "Q4_K_M model built",
        f"{tensor_gib:.2f} GiB of tensors, {quantized_gib:.2f} GiB kept quantized",
        time.perf_counter() - start,
        "s",
    )
    batch_one = None
    for batch in (1, 4, 8, 16, 32) if not ctx.dry_run else (1, 4):
        name = f"Q4_K_M b{batch} 2k"
        with ctx.rows.section(name):
            # b1 and b32 against their targets; the 2-16 band no slower per token than batch 1 (issue 29.3).
            target = TARGET.get(f"Q4_K_M b{batch}", batch_one)
            rate = decode_rows(ctx, name, model, config, batch, context_length(ctx, 2048), target)
            batch_one = rate if batch == 1 else batch_one
        ctx.free()


def gguf_peak(ctx: Context) -> None:
    """Model + one sequence's cache at a 32k context + the worst forward: the prompt chunk that ends the context
    (its attention spans all 32k) and a decode step there; after the model is built, in a fresh process."""
    from engine.cache import Cache
    from engine.forward_batch import ForwardBatch

    config, dev = gguf_config(ctx.dry_run), ctx.device
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    model, tensor_gib, _ = build_q4_k_m_model(config, dev, ctx.dtype)
    context, chunk = (32768, 2048) if not ctx.dry_run else (64, 16)
    cache = Cache(config, num_slots=1, max_len=context + 8, dtype=ctx.dtype, device=dev)
    for start in (0, context - chunk):
        batch = ForwardBatch.build([0], [start], [chunk], dev)
        model(torch.randint(0, config.vocab_size, (chunk,), device=dev), batch, cache)
    batch = ForwardBatch.build([0], [context], [1], dev)
    model(torch.randint(0, config.vocab_size, (1,), device=dev), batch, cache)
    ctx.sync()
    if dev.type != "cuda":
        ctx.rows.skip("Q4_K_M peak GiB, 32k", "dry run: no device memory to measure (the path ran)")
        return
    peak = torch.cuda.max_memory_allocated(dev) / 2**30
    ctx.rows.measure(
        "Q4_K_M peak GiB, 32k",
        peak,
        "GiB",
        at_most=GGUF_PEAK_GIB,
        note=f"model tensors {tensor_gib:.2f} GiB; cache + a {chunk}-token chunk ending the 32k context + decode",
    )


def decode_rows(
    ctx: Context, name: str, model, config, batch: int, context: int, target: float | None
) -> float:
    """`batch` sequences at `context`: the CUDA-graph step's tok/s (eager's in the note), then the graph replay
    against the capture-safe step and the eager forward from the same cache state. Returns the graph rate."""
    from engine.cache import Cache
    from engine.cuda_graphs import DecodeGraphRunner, compare_graph_with_eager
    from engine.forward_batch import ForwardBatch

    dev = ctx.device
    cache = Cache(config, num_slots=batch, max_len=context + 8, dtype=ctx.dtype, device=dev)
    for t in (cache.keys, cache.values, cache.conv):  # random states: zeros can run faster than real data
        t.normal_(0.0, 1.0)
    cache.recurrent.normal_(0.0, 0.01)
    ids = torch.randint(0, config.vocab_size, (batch,), device=dev)
    positions = torch.full((batch,), context, dtype=torch.long, device=dev)
    slots = torch.arange(batch, device=dev)
    forward_batch = ForwardBatch.build(list(range(batch)), [context] * batch, [1] * batch, dev)
    eager_ms = ctx.time_ms(lambda: model(ids, forward_batch, cache))

    def step(i: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return model.decode_step(i, p, s, cache)

    runner = DecodeGraphRunner(step, pad_slot_id=cache.pad_slot, batch_sizes=(batch,))
    runner.capture_all(dev)  # a passthrough on a CPU: the rows then time the capture-safe step itself
    graph_ms = ctx.time_ms(lambda: runner(ids, positions, slots))
    rate, eager_rate = batch / (graph_ms * 1e-3), batch / (eager_ms * 1e-3)
    roof = ROOFLINE.get(name)
    note = f"eager {figure(eager_rate)} tok/s" + (f"; roofline {roof:,.0f}" if roof else "")
    ctx.rows.measure(f"{name} graph", rate, "tok/s", at_least=target, note=note)

    def eager(i: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return model(i, ForwardBatch.build(s.tolist(), p.tolist(), [1] * i.numel(), dev), cache)

    check = compare_graph_with_eager(
        runner, eager, (ids, positions, slots), lambda: cache.rows_at(slots, positions), cache.put_rows
    )
    ctx.rows.check(f"{name} graph == eager", check.ok, check.describe())
    return rate


def prefill_row(ctx: Context, model, config, tokens: int) -> None:
    from engine.cache import Cache
    from engine.forward_batch import ForwardBatch

    dev = ctx.device
    cache = Cache(config, num_slots=1, max_len=tokens + 8, dtype=ctx.dtype, device=dev)
    batch = ForwardBatch.build([0], [0], [tokens], dev)
    ids = torch.randint(0, config.vocab_size, (tokens,), device=dev)
    ms = ctx.time_ms(lambda: model(ids, batch, cache), rep_ms=500)
    ctx.rows.measure(
        "bf16 prefill 8k",
        tokens / (ms * 1e-3),
        "tok/s",
        at_least=PREFILL_TARGET,
        note=f"{tokens} tokens in {ms:.1f} ms; roofline {ROOFLINE['bf16 prefill 8k']:,.0f}",
    )
