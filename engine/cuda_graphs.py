"""Decode-step CUDA graphs: capture the whole forward step once per padded batch size, then replay it.

At batch 1 a decode step of this model is a few hundred small kernel launches whose CPU launch cost exceeds the
GPU time of most of them; replaying a captured graph launches them all at once.

`DecodeGraphRunner(step, pad_slot_id)` wraps `step(input_ids[B], positions[B], slot_ids[B]) -> logits[B, V]`.
A call with batch B runs the graph of the smallest captured size >= B (captured on first use): the inputs are
copied into static buffers, the rows past B are padding (token 0, position 0, slot `pad_slot_id`), and the first
B rows of the static logits are returned. What `step` must guarantee, for a graph to replay correctly:
* no host synchronisation and no shapes that depend on values (no `.item()`, `.tolist()`, data-dependent
  slicing): everything a step reads from its inputs it reads on the device, e.g. attention over a fixed maximum
  span masked by `positions`, cache rows gathered and scattered by `slot_ids`;
* padded rows only touch the `pad_slot_id` cache slot, which the engine keeps as scratch (never given to a
  sequence).
On CPU tensors, for batches larger than the largest size, or with `AW_CUDA_GRAPHS=0`, the runner just calls
`step` (a passthrough).

The returned logits are a view of the graph's static output: the next call overwrites them, so sample from them
(or clone them) before calling again.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import torch

from engine import settings

DecodeStep = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)


def graphs_enabled() -> bool:
    return settings.cuda_graphs()


class DecodeGraphRunner:
    def __init__(
        self,
        step: DecodeStep,
        pad_slot_id: int,
        batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
        enabled: bool | None = None,
        warmup_steps: int = 2,
    ) -> None:
        if not batch_sizes or min(batch_sizes) < 1:
            raise ValueError("batch_sizes must be positive")
        self.step = step
        self.pad_slot_id = pad_slot_id
        self.batch_sizes = sorted(set(batch_sizes))
        self.enabled = graphs_enabled() if enabled is None else enabled
        self.warmup_steps = warmup_steps
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._pool = None

    @property
    def captured_sizes(self) -> list[int]:
        return sorted(self._graphs)

    def padded_size(self, batch: int) -> int | None:
        """The captured size a batch runs at, or None when it runs eagerly (larger than every size)."""
        i = bisect.bisect_left(self.batch_sizes, batch)
        return self.batch_sizes[i] if i < len(self.batch_sizes) else None

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slot_ids: torch.Tensor
    ) -> torch.Tensor:
        batch = input_ids.shape[0]
        size = self.padded_size(batch)
        if not self.enabled or input_ids.device.type != "cuda" or size is None or batch == 0:
            return self.step(input_ids, positions, slot_ids)
        if size not in self._graphs:
            self._capture(size, input_ids.device)
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
        """Drop every graph (e.g. after the cache is reallocated: graphs hold its addresses)."""
        self._graphs.clear()
        self._inputs = None
        self._pool = None

    def _fill_padding(self, start: int, end: int) -> None:
        static_ids, static_pos, static_slots = self._inputs
        static_ids[start:end].zero_()
        static_pos[start:end].zero_()
        static_slots[start:end].fill_(self.pad_slot_id)

    def _capture(self, size: int, device: torch.device) -> None:
        if self._inputs is None:
            # One set of input buffers at the largest size; each graph reads a prefix view of it.
            largest = self.batch_sizes[-1]
            self._inputs = tuple(torch.zeros(largest, dtype=torch.int64, device=device) for _ in range(3))
            self._pool = torch.cuda.graph_pool_handle()
        # Capture with padding only, so warm-up and capture write nothing but the scratch slot.
        self._fill_padding(0, size)
        ids, pos, slots = (t[:size] for t in self._inputs)
        # Warm up on a side stream first: Triton compiles, cuBLAS creates its handles and workspaces there, not
        # inside the capture.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(self.warmup_steps):
                self.step(ids, pos, slots)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self.step(ids, pos, slots)
        self._graphs[size] = (graph, logits)
