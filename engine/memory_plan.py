"""What the engine will hold in device memory, before it holds it: weights as stored, the per-sequence state
(KV of the full-attention layers + DeltaNet conv and recurrent state) for the context, the prefix cache, and
headroom (activations of one step, the CUDA context, allocator slack).

`LLM.memory_plan()` returns the plan of a running engine, `aw-mcp engine serve` prints it, `/metrics` exports it,
and the pre-flight plans a checkpoint before loading it, naming what would fit when the device is too small."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from engine.cache import Cache
from engine.config import Config
from engine.gguf.config import config_from_metadata
from engine.gguf.hub import resolve_gguf
from engine.gguf.reader import open_checkpoint
from engine.quant.weight import QuantizedExperts, QuantizedWeight

GIB = 2**30
# The CUDA context, cuBLAS/Triton workspaces and allocator fragmentation: measured ~0.6-0.9 GiB on an H200 with
# CUDA graphs for batch 1..64; 1 GiB keeps a margin.
RUNTIME_BYTES = GIB
# Bits per weight of the GGUF types (what a smaller file would take, for the "what fits" line).
BITS_PER_WEIGHT = {
    "Q8_0": 8.5,
    "Q6_K": 6.5625,
    "Q5_K_M": 5.7,
    "Q4_K_M": 4.9,
    "IQ4_XS": 4.25,
    "MXFP4_MOE": 4.4,
}


@dataclass(frozen=True)
class MemoryPlan:
    weights: int  # bytes as stored on the device (quantized blocks stay quantized)
    per_sequence: int  # one sequence's KV + DeltaNet state at `context` tokens
    sequences: int  # cache slots, plus one scratch slot the engine keeps for padded CUDA-graph rows
    context: int
    prefix_cache: int
    activations: int  # one step's largest temporaries at `batched_tokens`
    runtime: int
    prefill_attention: int = (
        0  # a prefill chunk's attention temporaries at `context` (`prefill_attention_bytes`)
    )

    @property
    def cache(self) -> int:
        return (self.sequences + 1) * self.per_sequence

    @property
    def total(self) -> int:
        return (
            self.weights
            + self.cache
            + self.prefix_cache
            + self.activations
            + self.prefill_attention
            + self.runtime
        )

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "cache": self.cache, "total": self.total}

    def render(self) -> str:
        return (
            f"memory plan: {gib(self.total)} = weights {gib(self.weights)} + cache {gib(self.cache)} "
            f"({self.sequences} sequence{'s' * (self.sequences != 1)} of {self.context} tokens, "
            f"{gib(self.per_sequence)} each, + 1 scratch) + prefix cache {gib(self.prefix_cache)} + "
            f"activations {gib(self.activations)} + prefill attention at {self.context} tokens "
            f"{gib(self.prefill_attention)} + runtime {gib(self.runtime)}"
        )

    def what_fits(self, budget: int) -> str:
        """One line: the sequences or the context that would fit in `budget`, or that the weights do not."""
        room = budget - self.weights - self.activations - self.prefill_attention - self.runtime
        # One sequence + the scratch slot; the prefill attention's bound grows with the context too.
        per_token = 2 * self.per_sequence / self.context + self.prefill_attention / self.context
        longest = (
            int((room + self.prefill_attention) / per_token) // 1024 * 1024
            if room > -self.prefill_attention
            else 0
        )
        if room >= 3 * self.per_sequence:
            seqs = int(room // self.per_sequence) - 1
            return (
                f"{gib(budget)} holds {seqs} sequences of {self.context} tokens (--max-num-seqs {seqs}) or one of "
                f"{longest} tokens (--max-model-len {longest}), with no prefix cache"
            )
        if longest >= 1024:
            return f"{gib(budget)} holds one sequence of {longest} tokens (--max-model-len {longest})"
        return (
            f"the weights ({gib(self.weights)}) with the runtime and one step's activations leave no room for a "
            f"cache in {gib(budget)}: use a smaller quantization "
            f"({smaller_types(self.weights, room + self.weights)}) or a bigger GPU"
        )


def smaller_types(weights: int, room: int) -> str:
    return "e.g. IQ4_XS or Q4_K_M" if room > 0.8 * weights else "a 3-bit or 2-bit file"


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB / 4 else f"{n / 2**20:.1f} MiB"


def activation_bytes(config: Config, batched_tokens: int, dtype: torch.dtype) -> int:
    """The largest live temporaries of a step: the fused projections' outputs, the MoE pairs' gate/up, the
    chunked delta rule's blocks, and one row of logits per sequence (fp32)."""
    item = torch.empty((), dtype=dtype).element_size()
    widest = max(
        2 * config.linear_conv_dim + config.linear_value_dim,
        2 * config.num_attention_heads * config.head_dim * 2,
        config.num_experts + 2 * config.shared_expert_intermediate_size,
    )
    moe = config.num_experts_per_tok * 3 * config.moe_intermediate_size
    per_token = (widest + moe + 6 * config.hidden_size) * item * 2
    return batched_tokens * per_token + 64 * config.vocab_size * 4


def prefill_attention_bytes(config: Config, batched_tokens: int, context: int, dtype: torch.dtype) -> int:
    """A bound on one prefill chunk's attention temporaries on a GPU at `context` keys (engine/layers/attention.py
    `prefill_attention`, one layer at a time): the chunk's query, output and its copy back, plus the KV heads
    repeated for the memory-efficient kernel ([heads, context, head_dim] for keys and values), the larger of the
    two fused paths (flash reads the grouped heads in place). The dense-mask path it replaced needed [heads, chunk,
    context] fp32 scores and more: 4 GiB of scores at 2,048 x 32k, 10.3 GiB measured through SDPA's math kernel.
    Without a fused kernel (a CPU) query blocks keep the scores within SCORE_BLOCK_BYTES."""
    item = torch.empty((), dtype=dtype).element_size()
    heads, head_dim = config.num_attention_heads, config.head_dim
    chunk = min(batched_tokens, context)
    return 3 * chunk * heads * head_dim * item + 2 * heads * context * head_dim * item


def plan_memory(
    config: Config,
    weight_bytes: int,
    *,
    context: int,
    sequences: int,
    dtype: torch.dtype,
    batched_tokens: int = 2048,
    prefix_cache: int = 0,
    runtime: int = RUNTIME_BYTES,
) -> MemoryPlan:
    return MemoryPlan(
        weights=weight_bytes,
        per_sequence=Cache.bytes_per_slot(config, context, dtype),
        sequences=sequences,
        context=context,
        prefix_cache=prefix_cache,
        activations=activation_bytes(config, batched_tokens, dtype),
        runtime=runtime,
        prefill_attention=prefill_attention_bytes(config, batched_tokens, context, dtype),
    )


def model_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes the model's weights hold: float parameters plus GGUF blocks (each storage counted once)."""

    seen: set[int] = set()
    total = 0

    def count(tensor: torch.Tensor) -> None:
        nonlocal total
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()

    for param in model.parameters():
        count(param)
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, QuantizedWeight):
                for part in value.parts:
                    count(part.data)
            elif isinstance(value, QuantizedExperts):
                for part in (value.gate, value.up, value.down):
                    count(part.data)
    return total


def plan_gguf(
    model: str, *, context: int = 32768, sequences: int = 1, dtype: torch.dtype = torch.bfloat16
) -> MemoryPlan:
    """The plan of a GGUF checkpoint before loading it (its metadata and tensor table only): what the pre-flight
    checks against the GPU. Raises `CheckpointError` for a file the engine cannot run."""

    gguf = open_checkpoint(resolve_gguf(model))
    embed = gguf.tensors.get("token_embd.weight")
    config = config_from_metadata(gguf.metadata, vocab_rows=embed.shape[0] if embed else None)
    context = min(context, config.max_position_embeddings)
    mtp = sum(t.nbytes for t in gguf.tensors.values() if _is_mtp(t.name, config.num_hidden_layers))
    return plan_memory(config, gguf.tensor_bytes - mtp, context=context, sequences=sequences, dtype=dtype)


def _is_mtp(name: str, num_layers: int) -> bool:
    parts = name.split(".")
    return parts[0] == "blk" and parts[1].isdecimal() and int(parts[1]) >= num_layers
