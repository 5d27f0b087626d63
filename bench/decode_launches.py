"""Kernel launches per decode step, counted on a CPU: the figure that bounds batch-1 decode on a GPU.

A batch-1 decode step of a 3B-active MoE moves about 6 GB, 1.4 ms on an H200; replayed from a CUDA graph, each
kernel still costs a few microseconds, so a step of 2,000 tiny kernels cannot beat ~5 ms whatever the bytes. This
counts what the capture-safe step (`model.decode_step`, the one `DecodeGraphRunner` captures) would launch on a
GPU, for the released layer pattern (40 layers, attention every 4th, 256 experts top-8) at toy widths: the count
does not depend on the widths. Triton launches are counted as they run (the Triton dispatch is forced, under
the interpreter); torch kernels are the profiler's compute ops, each counted once (not its internal calls).

    .venv/bin/python bench/decode_launches.py [--batch 1 32] [--top 12]   # about 3 minutes (interpreter)
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before the first triton import: kernels are decorated at import time
os.environ["AW_KERNELS"] = "triton"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

TRITON_RUN = "triton kernel (interpreted)"

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
}  # fmt: skip


def count_step(model, cache, batch: int) -> tuple[collections.Counter, collections.Counter]:
    from triton.runtime.interpreter import InterpretedFunction

    triton_launches: collections.Counter = collections.Counter()
    launch = InterpretedFunction.__getitem__

    def counted(self, grid):
        triton_launches[self.fn.__name__] += 1
        runner = launch(self, grid)

        def run(*args, **kwargs):
            with record_function(TRITON_RUN):  # the interpreter's own torch ops inside are not kernels
                return runner(*args, **kwargs)

        return run

    ids = torch.full((batch,), 7)
    positions = torch.full((batch,), 5)
    slots = torch.arange(batch)
    InterpretedFunction.__getitem__ = counted
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model.decode_step(ids, positions, slots, cache)
    finally:
        InterpretedFunction.__getitem__ = launch
    torch_kernels: collections.Counter = collections.Counter()
    for event in prof.events():
        if event.name not in LAUNCHING:
            continue
        parent = event.cpu_parent
        while parent is not None and parent.name not in LAUNCHING and parent.name != TRITON_RUN:
            parent = parent.cpu_parent
        if parent is None:
            torch_kernels[event.name] += 1
    return torch_kernels, triton_launches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--top", type=int, default=12, help="torch ops listed per batch size")
    args = parser.parse_args()

    from engine.cache import Cache
    from engine.config import Config
    from engine.models.qwen3_5_moe import Qwen3_5MoeForCausalLM

    config = Config(
        vocab_size=512, hidden_size=64, num_hidden_layers=40, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, num_experts=256, num_experts_per_tok=8, moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3_5MoeForCausalLM(config)
    for param in model.parameters():
        torch.nn.init.normal_(param, std=0.02)
    model.requires_grad_(False).fuse_weights()
    model.eval()
    layers = config.num_hidden_layers
    for batch in args.batch:
        cache = Cache(config, num_slots=batch, max_len=16, dtype=torch.float32, device=torch.device("cpu"))
        torch_kernels, triton_launches = count_step(model, cache, batch)
        total = sum(torch_kernels.values()) + sum(triton_launches.values())
        print(
            f"\nbatch {batch}: {total} launches per decode step ({total / layers:.1f} per layer): "
            f"{sum(torch_kernels.values())} torch kernels, {sum(triton_launches.values())} Triton"
        )
        print("  Triton: " + ", ".join(f"{n} {c}" for n, c in triton_launches.most_common()))
        print(
            "  torch:  "
            + ", ".join(f"{n.removeprefix('aten::')} {c}" for n, c in torch_kernels.most_common(args.top))
        )


if __name__ == "__main__":
    main()
