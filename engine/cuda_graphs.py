"""Decode-step CUDA graphs: capture the whole forward step once per padded batch size, at start-up, then replay it.

At batch 1 a decode step of this model is a few hundred small kernel launches whose CPU launch cost exceeds the
GPU time of most of them; replaying a captured graph launches them all at once.

`DecodeGraphRunner(step, pad_slot_id)` wraps `step(input_ids[B], positions[B], slot_ids[B]) -> logits[B, V]`.
`capture_all(device)` captures every padded size of `capture_plan` (largest first, as vLLM and nano-vllm do: the
smaller graphs reuse the largest one's memory pool), before the engine serves anything. A call with batch B
replays the graph of the smallest size >= B: the inputs are copied into static buffers, the rows past B are
padding (token 0, position 0, slot `pad_slot_id`), and the first B rows of the static logits are returned. A call
never captures: capturing lazily, beside caller threads that make CUDA calls of their own (a sampled request
creating its generator), is what breaks a capture. Capture also runs in CUDA's thread-local mode, so another
thread's CUDA calls during start-up (a second engine, a benchmark's own work) cannot invalidate it either.

What `step` must guarantee, for a graph to replay correctly:
* no host synchronisation and no shapes that depend on values (no `.item()`, `.tolist()`, data-dependent
  slicing): everything a step reads from its inputs it reads on the device, e.g. attention over a fixed maximum
  span masked by `positions`, cache rows gathered and scattered by `slot_ids`;
* padded rows only touch the `pad_slot_id` cache slot, which the engine keeps as scratch (never given to a
  sequence).
On CPU tensors, for batches larger than the largest size, for a size not captured, or with `AW_CUDA_GRAPHS=0`,
the runner just calls `step` (the same function, eagerly).

The returned logits are a view of the graph's static output: the next call overwrites them, so sample from them
(or clone them) before calling again. `compare_graph_with_eager` is the device check that a replay computes what
the eager step computes (`LLM.check_cuda_graphs` runs it for every captured size).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from engine import settings

logger = logging.getLogger(__name__)

DecodeStep = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)
# cudaStreamCaptureModeThreadLocal: only this thread's unsafe CUDA calls may invalidate the capture.
CAPTURE_ERROR_MODE = "thread_local"


def graphs_enabled() -> bool:
    return settings.cuda_graphs()


def padded_batch_sizes(num_slots: int, sizes: Sequence[int] = DEFAULT_BATCH_SIZES) -> list[int]:
    """Every padded size a decode batch of 1..num_slots sequences runs at: the default sizes below `num_slots`,
    and `num_slots` itself (a full batch never runs eagerly)."""
    return sorted({s for s in sizes if s < num_slots} | {num_slots})


class Graph(Protocol):
    def replay(self) -> None: ...


class GraphCapturer(Protocol):
    """How graphs are made: CUDA's (`CudaGraphCapturer`), or a fake in tests (capture order and mode on CPU)."""

    def supports(self, device: torch.device) -> bool: ...

    def new_pool(self, device: torch.device) -> Any: ...

    def warm_up(self, run: Callable[[], torch.Tensor], steps: int, device: torch.device) -> None: ...

    def capture(
        self, run: Callable[[], torch.Tensor], pool: Any, device: torch.device
    ) -> tuple[Graph, torch.Tensor]:
        """A graph of `run` and the static output it writes on every replay."""
        ...


class CudaGraphCapturer:
    def supports(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def new_pool(self, device: torch.device) -> Any:
        return torch.cuda.graph_pool_handle()

    def warm_up(self, run: Callable[[], torch.Tensor], steps: int, device: torch.device) -> None:
        # On a side stream: Triton compiles, cuBLAS creates its handles and workspaces there, not in the capture.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(steps):
                run()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

    def capture(
        self, run: Callable[[], torch.Tensor], pool: Any, device: torch.device
    ) -> tuple[Graph, torch.Tensor]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode=CAPTURE_ERROR_MODE):
            logits = run()
        return graph, logits


class DecodeGraphRunner:
    def __init__(
        self,
        step: DecodeStep,
        pad_slot_id: int,
        batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
        enabled: bool | None = None,
        warmup_steps: int = 2,
        capturer: GraphCapturer | None = None,
    ) -> None:
        if not batch_sizes or min(batch_sizes) < 1:
            raise ValueError("batch_sizes must be positive")
        self.step = step
        self.pad_slot_id = pad_slot_id
        self.batch_sizes = sorted(set(batch_sizes))
        self.enabled = graphs_enabled() if enabled is None else enabled
        self.warmup_steps = warmup_steps
        self.capturer: GraphCapturer = capturer or CudaGraphCapturer()
        self._graphs: dict[int, tuple[Graph, torch.Tensor]] = {}
        self._inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._pool: Any = None

    @property
    def captured_sizes(self) -> list[int]:
        return sorted(self._graphs)

    @property
    def capture_plan(self) -> list[int]:
        """The sizes `capture_all` captures, in its order: largest first."""
        return sorted(self.batch_sizes, reverse=True)

    def padded_size(self, batch: int) -> int | None:
        """The padded size a batch runs at, or None when it runs eagerly (larger than every size)."""
        i = bisect.bisect_left(self.batch_sizes, batch)
        return self.batch_sizes[i] if i < len(self.batch_sizes) else None

    def capture_all(self, device: torch.device) -> None:
        """Capture every size of the plan, once, before serving; nothing on a device without graphs or when
        disabled. Warm-up and capture run on padding only: they write nothing but the scratch slot."""
        if not self.enabled or not self.capturer.supports(device) or self._graphs:
            return
        started = time.perf_counter()
        largest = self.batch_sizes[-1]
        # One set of input buffers at the largest size; each graph reads a prefix view of it.
        self._inputs = tuple(torch.zeros(largest, dtype=torch.int64, device=device) for _ in range(3))
        self._pool = self.capturer.new_pool(device)
        for size in self.capture_plan:
            self._fill_padding(0, size)
            ids, pos, slots = (t[:size] for t in self._inputs)

            def run(
                ids: torch.Tensor = ids, pos: torch.Tensor = pos, slots: torch.Tensor = slots
            ) -> torch.Tensor:
                return self.step(ids, pos, slots)

            self.capturer.warm_up(run, self.warmup_steps, device)
            self._graphs[size] = self.capturer.capture(run, self._pool, device)
        logger.info(
            "engine: captured decode graphs for batch sizes %s in %.1f s",
            self.captured_sizes,
            time.perf_counter() - started,
        )

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor
    ) -> torch.Tensor:
        batch = input_ids.shape[0]
        size = self.padded_size(batch)
        if size not in self._graphs or batch == 0:
            return self.step(input_ids, positions, slot_ids)
        graph, logits = self._graphs[size]
        static_ids, static_pos, static_slots = self._inputs
        static_ids[:batch].copy_(input_ids)
        static_pos[:batch].copy_(positions)
        static_slots[:batch].copy_(slot_ids)
        if batch < size:
            self._fill_padding(batch, size)
        graph.replay()
        return logits[:batch]

    def reset(self) -> None:
        """Drop every graph, its memory pool and the static buffers (at shutdown, or when the cache is
        reallocated: graphs hold its addresses)."""
        self._graphs.clear()
        self._inputs = None
        self._pool = None

    def _fill_padding(self, start: int, end: int) -> None:
        static_ids, static_pos, static_slots = self._inputs
        static_ids[start:end].zero_()
        static_pos[start:end].zero_()
        static_slots[start:end].fill_(self.pad_slot_id)


@dataclass(frozen=True)
class GraphCheck:
    """One padded size: how far a graph replay's logits are from the same step run eagerly (`vs_step`: the same
    kernels, so ~0) and from the engine's eager decode forward (`vs_eager`: other kernels' rounding), both as max
    absolute differences over the batch's real rows, against `scale` (the largest |logit|)."""

    batch: int
    padded: int | None  # None: this batch runs eagerly (no graph to check)
    vs_step: float
    vs_eager: float
    scale: float
    tokens_agree: bool  # the eager forward's greedy token of every row is a top token of the replay too
    ok: bool

    def describe(self) -> str:
        return (
            f"batch {self.batch} (graph {self.padded}): |graph - step| {self.vs_step:.3g}, "
            f"|graph - eager| {self.vs_eager:.3g} of |logits| {self.scale:.3g}, "
            f"greedy tokens {'agree' if self.tokens_agree else 'DIFFER'}: {'ok' if self.ok else 'FAIL'}"
        )


def compare_graph_with_eager(
    graphs: DecodeGraphRunner,
    eager: DecodeStep,
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    save_state: Callable[[], Any],
    restore_state: Callable[[Any], None],
    step_tolerance: float = 1e-3,
    eager_tolerance: float = 2e-2,
) -> GraphCheck:
    """Run one decode batch three ways from the same cache state (`save_state` before, `restore_state` after
    each run, since a step writes KV and advances the DeltaNet state in place): the eager forward `eager`, the
    capture-safe step eagerly (`graphs.step`), and the graph replay (`graphs(...)`). Tolerances are relative to
    the largest |logit| (bf16 logits of other kernels differ by a few percent of it at most)."""
    batch = inputs[0].shape[0]
    state = save_state()
    try:
        reference = eager(*inputs).float().clone()
        restore_state(state)
        stepped = graphs.step(*inputs).float().clone()
        restore_state(state)
        replayed = graphs(*inputs).float().clone()
    finally:
        restore_state(state)
    scale = max(1.0, _largest(reference[torch.isfinite(reference)]))
    vs_step, vs_eager = _max_gap(replayed, stepped), _max_gap(replayed, reference)
    picked = replayed.gather(1, reference.argmax(-1, keepdim=True)).squeeze(1)
    tokens_agree = bool((picked >= replayed.max(-1).values - eager_tolerance * scale).all())
    ok = vs_step <= step_tolerance * scale and vs_eager <= eager_tolerance * scale and tokens_agree
    size = graphs.padded_size(batch)
    return GraphCheck(
        batch, size if size in graphs.captured_sizes else None, vs_step, vs_eager, scale, tokens_agree, ok
    )


def _max_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the entries finite in both; infinite when they disagree on which entries are -inf."""
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not bool(((a == b) | finite).all()):
        return float("inf")
    return _largest(a[finite] - b[finite])


def _largest(values: torch.Tensor) -> float:
    return float(values.abs().max()) if values.numel() else 0.0
