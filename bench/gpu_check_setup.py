"""What every gpu_check part shares: its context (rows, device, budget), the model configs (the real 35B-A3B on a
GPU, tiny ones on a dry run), the random full-size model, timing, and the targets the rows are judged by."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from gpu_check_rows import Rows

# Targets on an H200 (issue 29): tok/s unless named otherwise. Rooflines: engine-anchors.md section 4.
TARGET = {"bf16 b1": 400.0, "bf16 b32": 2000.0, "Q4_K_M b1": 600.0, "Q4_K_M b32": 2000.0, "loop b32": 2000.0}
ROOFLINE = {"bf16 b1 2k": 790.0, "bf16 b1 30k": 720.0, "bf16 b32 2k": 3000.0, "bf16 prefill 8k": 142_000.0}
ROOFLINE.update({"Q4_K_M b1 2k": 2400.0, "Q4_K_M b32 2k": 9000.0})  # Q4_K_M reads ~1.7 GB per token
PREFILL_TARGET = 20_000.0
GGUF_PEAK_GIB = 24.0  # the 35B-A3B at Q4_K_M with a 32k context must fit a 24 GiB card


@dataclass
class Context:
    rows: Rows
    dry_run: bool
    device: torch.device
    budget_s: float
    out_dir: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.dry_run else torch.bfloat16

    def remaining(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def free(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def time_ms(self, fn: Callable[[], object], rep_ms: int = 200) -> float:
        """Median milliseconds per call: CUDA events via triton's do_bench (`rep_ms` of timed calls) on a GPU; one
        wall-clocked call on a dry run (the figure only exercises the path)."""
        if self.device.type == "cuda":
            import triton.testing

            return float(triton.testing.do_bench(fn, warmup=25, rep=rep_ms, return_mode="median"))
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3


def make_context(rows: Rows, dry_run: bool, budget_s: float, out_dir: Path) -> Context:
    if dry_run:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        raise SystemExit("no CUDA device: run bench/gpu_check.sh --dry-run on a CPU")
    torch.manual_seed(0)
    return Context(rows, dry_run, device, budget_s, out_dir)


def model_config(dry_run: bool):
    """The released Qwen3.5-35B-A3B text config (model-qwen35-moe.md section 1), or a tiny one on a dry run."""
    from engine.config import Config

    if dry_run:
        return Config(
            vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        )  # fmt: skip
    return Config(
        vocab_size=248320, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2,
        head_dim=256, rms_norm_eps=1e-6, rope_theta=1e7, partial_rotary_factor=0.25, linear_conv_kernel_dim=4,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
        num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512,
    )  # fmt: skip


def gguf_config(dry_run: bool):
    """The real config, or on a dry run the GGUF fixtures' small shape (K-quant rows are 256-multiples)."""
    from engine.config import Config

    if not dry_run:
        return model_config(False)
    return Config(
        vocab_size=320, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256,
        shared_expert_intermediate_size=256, layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip


def context_length(ctx: Context, real: int) -> int:
    """A context of `real` tokens on the GPU; on a dry run a few dozen."""
    return real if not ctx.dry_run else max(8, min(64, real // 512))


def build_random_model(config, device: torch.device, dtype: torch.dtype):
    """The engine's model with random weights made on the device: the loader's path minus the checkpoint,
    projections fused as `build_model` fuses them (the first H200 run measured an unfused model: 391 GEMM launches
    per decode step instead of 161)."""
    from engine.loader import FP32_PARAM_SUFFIXES
    from engine.models.qwen3_5_moe import Qwen3_5MoeForCausalLM

    with torch.device("meta"):
        model = Qwen3_5MoeForCausalLM(config)
    model.to(dtype)
    for name, param in model.named_parameters():
        if name.endswith(FP32_PARAM_SUFFIXES):
            param.data = param.data.float()
    model.to_empty(device=device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("A_log"):
                param.uniform_(0.0, 2.7)  # decay rates exp(A_log) in 1..16, as in the released model
            elif name.endswith("dt_bias"):
                param.uniform_(-1.0, 1.0)
            elif name.endswith("linear_attn.norm.weight"):
                param.normal_(1.0, 0.05)
            elif name.endswith("norm.weight"):
                param.normal_(0.0, 0.05)  # zero-centred norms: the weight is an offset from 1
            else:
                param.normal_(0.0, 0.02)
    model.requires_grad_(False).fuse_weights()
    return model.eval()


def build_q4_k_m_model(config, device: torch.device, dtype: torch.dtype):
    """The model at Q4_K_M (llama.cpp's type recipe, random blocks made on the device) through the same
    `build_gguf_model` a file goes through. Returns (model, tensor GiB, GiB kept quantized)."""
    from engine.gguf.loader import build_gguf_model
    from engine.testing.quant_recipe import q4_k_m_table, random_checkpoint, table_bytes

    table = q4_k_m_table(config)
    model, report = build_gguf_model(
        random_checkpoint(config, table, device), config, device, dtype, progress=False
    )
    return model, table_bytes(table) / 2**30, report.quantized_bytes / 2**30


def tiny_tokenizer():
    """The tiny checkpoints' tokenizer (the served rows measure the loop, not the text)."""
    import tempfile

    from transformers import AutoTokenizer

    from engine.testing.tiny_checkpoint import build_tokenizer, save_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        save_tokenizer(build_tokenizer(), Path(tmp))
        return AutoTokenizer.from_pretrained(tmp)


def triton_cache_entries() -> int | None:
    """How many compiled kernels the Triton cache holds (a part's growth = what it compiled cold)."""
    base = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    return sum(1 for _ in base.iterdir()) if base.is_dir() else None
