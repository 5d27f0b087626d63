"""gpu_check part, last: where one batch-1 decode step at 2k context spends its time, bf16 then Q4_K_M, for the
eager forward and the capture-safe step the CUDA graph replays (its kernels launched one by one here): kernels per
step and GPU time per step as rows, the top of each profile in $OUT/gpu_check_profile.txt."""

from __future__ import annotations

import torch
from gpu_check_setup import (
    Context,
    build_q4_k_m_model,
    build_random_model,
    context_length,
    gguf_config,
    model_config,
)
from torch.profiler import ProfilerActivity, profile


def decode_profile(ctx: Context) -> None:
    report = ctx.out_dir / "gpu_check_profile.txt"
    report.write_text("")
    for label in ("bf16", "Q4_K_M"):
        with ctx.rows.section(f"profile {label}"):
            if label == "bf16":
                config = model_config(ctx.dry_run)
                model = build_random_model(config, ctx.device, ctx.dtype)
            else:
                config = gguf_config(ctx.dry_run)
                model = build_q4_k_m_model(config, ctx.device, ctx.dtype)[0]
            profile_step(ctx, label, model, config, report)
            del model
            ctx.free()


def profile_step(ctx: Context, label: str, model, config, report) -> None:  # noqa: ANN001
    from engine.cache import Cache
    from engine.forward_batch import ForwardBatch

    dev, context = ctx.device, context_length(ctx, 2048)
    cache = Cache(config, num_slots=1, max_len=context + 8, dtype=ctx.dtype, device=dev)
    batch = ForwardBatch.build([0], [context], [1], dev)
    ids = torch.randint(0, config.vocab_size, (1,), device=dev)
    positions = torch.full((1,), context, dtype=torch.long, device=dev)
    slots = torch.zeros(1, dtype=torch.long, device=dev)
    steps = {
        "eager forward": lambda: model(ids, batch, cache),
        "static step": lambda: model.decode_step(ids, positions, slots, cache),  # what the graph replays
    }
    on_gpu = dev.type == "cuda"
    activity = ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU
    for name, step in steps.items():
        for _ in range(3):
            step()
        ctx.sync()
        with profile(activities=[activity]) as prof:
            for _ in range(5):
                step()
            ctx.sync()
        if on_gpu:
            events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            per_step_us = sum(e.device_time for e in events) / 5
        else:  # a dry run: the ops the CPU ran, to exercise the path
            events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
            per_step_us = sum(e.self_cpu_time_total for e in events) / 5
        unit = "kernels" if on_gpu else "CPU ops"
        ctx.rows.info(
            f"profile {label} b1 2k {name}", f"{len(events) / 5:.0f} {unit} per step", per_step_us / 1e3, "ms"
        )
        table = prof.key_averages().table(
            sort_by="self_device_time_total" if on_gpu else "self_cpu_time_total",
            row_limit=18,
            max_name_column_width=70,
        )
        with report.open("a") as f:
            f.write(
                f"== {label} b1 at 2k, {name}: {len(events) / 5:.0f} {unit}, {per_step_us / 1e3:.2f} ms ==\n"
            )
            f.write(table + "\n\n")
