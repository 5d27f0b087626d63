"""What the ahead-of-time check runs: the real model, at the real widths, through its own forward.

A model of each weight format is built on the meta device (no memory; the bf16 model as `engine.loader` builds it,
the GGUF ones through `build_gguf_model` from a checkpoint whose tensors are meta tensors of the types llama.cpp's
quantizer writes), with a meta cache, and stepped with `AW_KERNELS=triton` inside `capture`: every Triton launch of
every layer, of the embedding and of the head is recorded, whatever kernel a wrapper chooses. The batch metadata
(cu_seqlens, positions, slots) are real CPU tensors, so the host reads prefill makes (chunk bounds, the longest
sequence) see real values.

Steps (each a `Scenario`): decode at every batch size 1..32 (the eager step, and the CUDA-graph step a padded
batch replays), at a short and a 32k context; prefill of T = 2^k and 2^k + 1 tokens up to the 2,048-token chunk
(every power-of-two threshold a wrapper may switch at), a 2,048-token chunk ending a 32k context, and a mixed
step (decodes beside a prompt chunk).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import torch

from engine.cache import Cache
from engine.config import FULL_ATTENTION, LINEAR_ATTENTION, Config
from engine.forward_batch import ForwardBatch
from engine.gguf.loader import build_gguf_model
from engine.gguf.reader import GGUFCheckpoint, GGUFTensor
from engine.gguf.tensor_table import q4_k_m_table
from engine.kernels import fused_recurrent_gated_delta_rule
from engine.loader import meta_model
from engine.quant.formats import FLOAT_TYPES, GGMLType, row_bytes

META = torch.device("meta")
HOST = torch.device("cpu")
DTYPE = torch.bfloat16
FORMATS = ("bf16", "Q4_K_M", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "IQ4_XS", "MXFP4")
MAX_DECODE_BATCH = 32
PREFILL_CHUNK = 2048
CONTEXTS = (4096, 32768)  # cache capacity (and, for the eager decode, the position reached)
_FLOAT_DTYPES = {GGMLType.F32: torch.float32, GGMLType.F16: torch.float16, GGMLType.BF16: torch.bfloat16}


@dataclass(frozen=True)
class Scenario:
    label: str
    path: str  # "decode" or "prefill"
    run: Callable[[], object]


def real_config() -> Config:
    """Qwen3.5-35B-A3B's text config (engine.config's defaults are the checkpoint's) with two of its 40 layers,
    one of each type: every layer of a type launches the same kernels at the same shapes. In the Q4_K_M table
    (`use_more_bits` of 2 layers) the first layer's expert down-projection is Q4_K and the second's Q6_K."""
    return Config(num_hidden_layers=2, layer_types=[LINEAR_ATTENTION, FULL_ATTENTION])


def _meta_checkpoint(config: Config, kind: GGMLType | None) -> GGUFCheckpoint:
    """Q4_K_M's tensor table (kind None) or every quantized tensor of it in `kind`, as meta tensors."""
    tensors = {}
    for name, (stored, shape) in q4_k_m_table(config).items():
        if stored in FLOAT_TYPES:
            data = torch.empty(shape, dtype=_FLOAT_DTYPES[stored], device=META)
        else:
            stored = kind or stored
            data = torch.empty(*shape[:-1], row_bytes(stored, shape[-1]), dtype=torch.uint8, device=META)
        tensors[name] = GGUFTensor(name, stored, shape, data, file=None)  # type: ignore[arg-type]
    return GGUFCheckpoint([], {"general.architecture": "qwen35moe"}, tensors)


@cache
def build_model(fmt: str) -> torch.nn.Module:
    """The model of weight format `fmt` (one of FORMATS) on the meta device, fused as the engine runs it (built
    once per process: it holds no memory, and each card's capture steps it again)."""
    config = real_config()
    if fmt == "bf16":
        model = meta_model(config, DTYPE)
        model.requires_grad_(False).fuse_weights()
        return model.eval()
    kind = None if fmt == "Q4_K_M" else GGMLType[fmt]
    model, _ = build_gguf_model(_meta_checkpoint(config, kind), config, META, DTYPE, progress=False)
    return model


def _ids(count: int) -> torch.Tensor:
    return torch.zeros(count, dtype=torch.int64, device=META)


def _decode_steps(model: torch.nn.Module, cache: Cache, context: int) -> Iterator[Scenario]:
    position = context - 1
    for batch in range(1, MAX_DECODE_BATCH + 1):
        slots = list(range(batch))

        def eager(slots: list[int] = slots) -> object:
            step = ForwardBatch.build(slots, [position] * len(slots), [1] * len(slots), HOST)
            return model(_ids(len(slots)), step, cache)

        def graph(slots: list[int] = slots) -> object:
            positions = torch.full((len(slots),), position, dtype=torch.int64)
            return model.decode_step(_ids(len(slots)), positions, torch.tensor(slots), cache)

        yield Scenario(f"decode b{batch} ctx{context}", "decode", eager)
        yield Scenario(f"decode graph b{batch} ctx{context}", "decode", graph)


def _prefill_lengths() -> list[int]:
    lengths = {PREFILL_CHUNK}
    power = 2
    while power < PREFILL_CHUNK:
        lengths.update((power, power + 1))
        power *= 2
    return sorted(lengths)


def _prefill_steps(model: torch.nn.Module, cache: Cache, context: int) -> Iterator[Scenario]:
    def chunk(starts: list[int], lengths: list[int]) -> Callable[[], object]:
        slots = list(range(len(lengths)))
        return lambda: model(_ids(sum(lengths)), ForwardBatch.build(slots, starts, lengths, HOST), cache)

    if context == CONTEXTS[0]:
        for length in _prefill_lengths():
            yield Scenario(f"prefill T{length}", "prefill", chunk([0], [length]))
        decodes = MAX_DECODE_BATCH - 1
        mixed = chunk([100] * decodes + [0], [1] * decodes + [PREFILL_CHUNK - decodes])
        yield Scenario(f"prefill mixed {decodes}x1+{PREFILL_CHUNK - decodes}", "prefill", mixed)
    start = context - PREFILL_CHUNK
    yield Scenario(f"prefill T{PREFILL_CHUNK} at {start}", "prefill", chunk([start], [PREFILL_CHUNK]))


def scenarios(fmt: str) -> Iterator[Scenario]:
    """Every step of format `fmt`'s model."""
    config = real_config()
    model = build_model(fmt)
    for context in CONTEXTS:
        cache = Cache(config, MAX_DECODE_BATCH, context, DTYPE, META)
        yield from _decode_steps(model, cache, context)
        yield from _prefill_steps(model, cache, context)


def op_scenarios() -> Iterator[Scenario]:
    """Ops the engine exports that the model's forward does not call, at the model's DeltaNet shapes."""
    config = real_config()
    heads_k, heads_v = config.linear_num_key_heads, config.linear_num_value_heads
    dim_k, dim_v = config.linear_key_head_dim, config.linear_value_head_dim

    def recurrent(batch: int, length: int) -> Callable[[], object]:
        def run() -> object:
            q, k = (torch.empty(1, batch * length, heads_k, dim_k, dtype=DTYPE, device=META) for _ in "qk")
            v = torch.empty(1, batch * length, heads_v, dim_v, dtype=DTYPE, device=META)
            g, beta = (torch.empty(1, batch * length, heads_v, dtype=DTYPE, device=META) for _ in "gb")
            state = torch.empty(batch, heads_v, dim_k, dim_v, dtype=torch.float32, device=META)
            cu_seqlens = torch.arange(batch + 1, dtype=torch.int64) * length
            return fused_recurrent_gated_delta_rule(
                q, k, v, g, beta, initial_state=state, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens,
                inplace_final_state=True,
            )  # fmt: skip

        return run

    for batch in (1, MAX_DECODE_BATCH):
        yield Scenario(f"fused_recurrent_gated_delta_rule b{batch}", "decode", recurrent(batch, 1))
    yield Scenario(
        f"fused_recurrent_gated_delta_rule T{PREFILL_CHUNK}", "prefill", recurrent(1, PREFILL_CHUNK)
    )


@contextmanager
def triton_kernels() -> Iterator[None]:
    """Every op through its Triton wrapper (the tensors are meta tensors, not CUDA ones)."""
    saved = os.environ.get("AW_KERNELS")
    os.environ["AW_KERNELS"] = "triton"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("AW_KERNELS")
        else:
            os.environ["AW_KERNELS"] = saved
