"""What one model step runs: which sequences (cache slots), how many new tokens each, and where they start; and the
two copies between host and device that a step makes without waiting (`to_device` up, `HostCopy` down)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def to_device(
    values: Sequence[Sequence[int | float]], device: torch.device, dtype: torch.dtype = torch.int64
) -> list[torch.Tensor]:
    """Tensors of `values` (`dtype`, int64 by default) on `device`, in one copy: packed into one host tensor, split
    there. For a GPU the host tensor is pinned and the copy non-blocking, so the host goes on (building the rest of
    the step) while it runs; stream order makes every later kernel see it."""
    host = torch.tensor([x for v in values for x in v], dtype=dtype)
    if device.type == "cuda":
        host = host.pin_memory().to(device, non_blocking=True)
    elif device.type != "cpu":
        host = host.to(device)
    return list(host.split([len(v) for v in values]))


class HostCopy:
    """A device tensor's copy on its way to the host: on a GPU into pinned memory, non-blocking, with a CUDA event
    recorded after it, so the host waits (`wait`) only when it needs the values, not when it queues the copy. The
    event completes once the copy is done, not when later work in the stream is: kernels queued after it (the
    next step) keep running while the host reads. On CPU the values are already on the host: no copy, no event;
    on another device the copy is made at once (blocking)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._event: torch.cuda.Event | None = None
        if tensor.device.type == "cuda":
            self._host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            self._host.copy_(tensor, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = tensor.cpu()

    def wait(self) -> torch.Tensor:
        """The host tensor, once the copy has landed."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._host

    def tolist(self) -> list:
        return self.wait().tolist()


@dataclass
class ForwardBatch:
    """Tokens of all sequences are packed along one axis: sequence i owns rows cu_seqlens[i]:cu_seqlens[i+1].

    Two kinds of decode batch exist. `build` (eager) knows the lengths on the host, so the torch attention reads
    just the cached span and consecutive slots are plain views. `static_decode` (capture-safe, for CUDA graphs)
    knows nothing on the host: the kernels find each sequence's cache rows through `slots` and its extent through
    `positions` (the torch references gather the rows and mask the whole cache). Both compute the same function."""

    slots: torch.Tensor  # int64 [N] cache slot of each sequence
    slot_list: list[int]  # host copy of `slots` (empty for a static decode batch)
    starts: list[int]  # tokens of each sequence already in the cache (empty for a static decode batch)
    lengths: list[int]  # new tokens of each sequence in this step (empty for a static decode batch)
    positions: torch.Tensor  # int64 [T] absolute position of every packed token
    cu_seqlens: torch.Tensor  # int64 [N + 1]
    is_decode: bool  # every sequence brings exactly one token
    slot_range: tuple[int, int] | None  # (first, end) when the slots are consecutive: cache views, no gathers
    span: int = 0  # decode: cache positions attention reads (every sequence's keys lie in 0 .. span - 1)
    input_ids: torch.Tensor | None = None  # int64 [T] packed tokens, when `build` was given them

    @classmethod
    def build(
        cls,
        slot_list: list[int],
        starts: list[int],
        lengths: list[int],
        device: torch.device,
        input_ids: Sequence[int] | None = None,
    ) -> ForwardBatch:
        """The batch, and with `input_ids` its packed tokens (`batch.input_ids`), moved in one host-to-device copy."""
        if not (len(slot_list) == len(starts) == len(lengths)) or not slot_list:
            raise ValueError("a batch needs one slot, start and length per sequence")
        positions = [p for s, n in zip(starts, lengths, strict=True) for p in range(s, s + n)]
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        ids = [] if input_ids is None else input_ids
        ids_dev, positions_dev, cu_dev, slots_dev = to_device([ids, positions, cu, slot_list], device)
        consecutive = slot_list == list(range(slot_list[0], slot_list[0] + len(slot_list)))
        return cls(
            slots=slots_dev,
            slot_list=list(slot_list),
            starts=list(starts),
            lengths=list(lengths),
            positions=positions_dev,
            cu_seqlens=cu_dev,
            is_decode=all(n == 1 for n in lengths),
            slot_range=(slot_list[0], slot_list[0] + len(slot_list)) if consecutive else None,
            span=max(s + n for s, n in zip(starts, lengths, strict=True)),
            input_ids=None if input_ids is None else ids_dev,
        )

    @classmethod
    def static_decode(cls, positions: torch.Tensor, slot_ids: torch.Tensor, max_len: int) -> ForwardBatch:
        """A decode batch described only by device tensors (no host sync, shapes fixed by the batch size):
        what a CUDA graph can capture once and replay for any lengths and slots."""
        num_seqs = slot_ids.shape[0]
        return cls(
            slots=slot_ids,
            slot_list=[],
            starts=[],
            lengths=[],
            positions=positions,
            cu_seqlens=torch.arange(num_seqs + 1, dtype=torch.int64, device=slot_ids.device),
            is_decode=True,
            slot_range=None,
            span=max_len,
        )

    @property
    def num_seqs(self) -> int:
        return self.slots.shape[0]

    def select(self, per_slot: torch.Tensor) -> torch.Tensor:
        """Rows of a per-slot cache tensor for this batch: a view (writes go to the cache) when slots are
        consecutive, else a gathered copy that `write_back` must store."""
        if self.slot_range is not None:
            return per_slot[self.slot_range[0] : self.slot_range[1]]
        return per_slot.index_select(0, self.slots)

    def write_back(self, per_slot: torch.Tensor, rows: torch.Tensor) -> None:
        if self.slot_range is not None:
            target = per_slot[self.slot_range[0] : self.slot_range[1]]
            if target.data_ptr() != rows.data_ptr():
                target.copy_(rows)
            return
        per_slot.index_copy_(0, self.slots, rows.to(per_slot.dtype))
