"""Kernel launches per decode step at the released model's real widths, counted on a CPU without running a kernel.

A batch-1 decode step of a 3B-active MoE moves about 6 GB (bf16), 1.4 ms on an H200; replayed from a CUDA graph,
each kernel still costs a few microseconds, so a step of 1,000 small kernels cannot beat ~3 ms whatever the bytes.
This counts what the capture-safe step (`model.decode_step`, the one `DecodeGraphRunner` captures) launches on a
GPU, for the released Qwen3.5-35B-A3B config (40 layers, attention every 4th, 256 experts top-8, hidden 2048,
vocabulary 248,320), in bf16 and as a Q4_K_M GGUF (llama.cpp's type recipe, `engine/testing/quant_recipe.py`,
through the same `build_gguf_model` a file goes through).

Everything lives on the `meta` device (the models of the ahead-of-time compile check, `engine/kernels/aot`):
tensors have shapes but no memory, so the real widths cost nothing and the wrappers take their GPU paths (a meta
tensor is not a CPU one) with their real-width launch choices (split-K, block sizes). Triton launches are counted where `kernel[grid](...)` lands (`JITFunction.run`, not run); torch
kernels are the profiler's compute ops, each counted once (not the ops it calls inside).

The counted step follows one uncounted one (`--warmup`): a captured graph never replays a first step's one-time
work (the packed GEMV's lookup table is built per device on first use).

    .venv/bin/python bench/decode_launches.py [--model bf16 gguf] [--batch 1 32] [--top 12] [--warmup 1]   # ~30 s
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

os.environ["AW_KERNELS"] = "triton"  # meta tensors are not CUDA ones: force the Triton paths a GPU takes
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

# aten ops that launch a kernel of their own on a GPU (views, allocations and composites that only call others are
# left out; a compute op called from inside another one is not counted again).
LAUNCHING = {
    "aten::mm", "aten::addmm", "aten::bmm", "aten::mul", "aten::add", "aten::sub", "aten::div", "aten::neg",
    "aten::exp", "aten::sigmoid", "aten::silu", "aten::softplus", "aten::copy_", "aten::index_select",
    "aten::index_copy_", "aten::index_put_", "aten::cat", "aten::arange", "aten::cos", "aten::sin", "aten::le",
    "aten::lt", "aten::ge", "aten::gt", "aten::eq", "aten::embedding", "aten::cumsum", "aten::sort",
    "aten::argsort", "aten::searchsorted", "aten::scatter_add_", "aten::fill_", "aten::zero_", "aten::sum",
    "aten::mean", "aten::clamp_", "aten::clamp", "aten::index", "aten::topk", "aten::_softmax", "aten::rsqrt",
    "aten::pow", "aten::div_", "aten::mul_", "aten::add_", "aten::sub_", "aten::masked_fill_", "aten::where",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::reciprocal", "aten::logical_and", "aten::amax",
    "aten::gather", "aten::scatter_", "aten::index_add_", "aten::_fused_rms_norm", "aten::bitwise_and",
    "aten::bincount", "aten::ones_like", "aten::zeros_like", "aten::full", "aten::remainder", "aten::floor_divide",
}  # fmt: skip


def count_step(
    model: torch.nn.Module, cache, batch: int, warmup: int = 1
) -> tuple[collections.Counter, collections.Counter]:
    """(torch kernels, Triton launches) of one decode step of `batch` sequences, after `warmup` uncounted steps:
    what a replayed CUDA graph runs, without the one-time work of a process's first step (lookup tables built
    per device on first use)."""
    triton_launches: collections.Counter = collections.Counter()
    launch = JITFunction.run

    def counted(self, *args, grid, warmup, **kwargs):  # noqa: ARG001
        triton_launches[self.fn.__name__] += 1

    device = torch.device("meta")
    ids = torch.full((batch,), 7, device=device)
    positions = torch.full((batch,), 5, device=device)
    slots = torch.arange(batch, device=device)
    JITFunction.run = counted  # type: ignore[method-assign]
    try:
        for _ in range(warmup):
            model.decode_step(ids, positions, slots, cache)
        triton_launches.clear()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model.decode_step(ids, positions, slots, cache)
    finally:
        JITFunction.run = launch  # type: ignore[method-assign]
    torch_kernels: collections.Counter = collections.Counter()
    for event in prof.events():
        if event.name not in LAUNCHING:
            continue
        parent = event.cpu_parent
        while parent is not None and parent.name not in LAUNCHING:
            parent = parent.cpu_parent
        if parent is None:
            torch_kernels[event.name] += 1
    return torch_kernels, triton_launches


def meta_model_of(which: str, config) -> torch.nn.Module:
    """The bf16 model as `engine.loader` builds it, or the Q4_K_M one from the compile check's meta checkpoint,
    both on the meta device and fused as the engine runs them."""
    from engine.gguf.loader import build_gguf_model
    from engine.kernels.aot.scenarios import _meta_checkpoint
    from engine.loader import meta_model

    meta = torch.device("meta")
    if which == "bf16":
        model = meta_model(config, torch.bfloat16)
        model.requires_grad_(False).fuse_weights()
        return model.eval()
    model, _ = build_gguf_model(_meta_checkpoint(config, None), config, meta, torch.bfloat16, progress=False)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", choices=["bf16", "gguf"], default=["bf16", "gguf"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--context", type=int, default=2048, help="cache length per sequence")
    parser.add_argument("--top", type=int, default=12, help="torch ops listed per row")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted steps before the counted one")
    args = parser.parse_args()

    from engine.cache import Cache
    from engine.config import Config

    config = Config()  # the released text config, all 40 layers
    names = {"bf16": "bf16", "gguf": "GGUF Q4_K_M"}
    for which in args.model:
        model = meta_model_of(which, config)
        for batch in args.batch:
            cache = Cache(
                config,
                num_slots=batch,
                max_len=args.context,
                dtype=torch.bfloat16,
                device=torch.device("meta"),
            )
            torch_kernels, triton_launches = count_step(model, cache, batch, args.warmup)
            n_torch, n_triton = sum(torch_kernels.values()), sum(triton_launches.values())
            total = n_torch + n_triton
            print(
                f"\n{names[which]} batch {batch}: {total} launches per decode step "
                f"({total / config.num_hidden_layers:.1f} per layer): {n_torch} torch kernels, {n_triton} Triton"
            )
            print("  Triton: " + ", ".join(f"{n} {c}" for n, c in triton_launches.most_common()))
            print(
                "  torch:  "
                + ", ".join(f"{n.removeprefix('aten::')} {c}" for n, c in torch_kernels.most_common(args.top))
            )


if __name__ == "__main__":
    main()
