"""What one model step runs: which sequences (cache slots), how many new tokens each, and where they start."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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

    @classmethod
    def build(
        cls, slot_list: list[int], starts: list[int], lengths: list[int], device: torch.device
    ) -> ForwardBatch:
        if not (len(slot_list) == len(starts) == len(lengths)) or not slot_list:
            raise ValueError("a batch needs one slot, start and length per sequence")
        positions = torch.cat(
            [torch.arange(s, s + n, dtype=torch.int64) for s, n in zip(starts, lengths, strict=True)]
        )
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int64)
        cu[1:] = torch.tensor(lengths).cumsum(0)
        consecutive = slot_list == list(range(slot_list[0], slot_list[0] + len(slot_list)))
        return cls(
            slots=torch.tensor(slot_list, dtype=torch.int64, device=device),
            slot_list=list(slot_list),
            starts=list(starts),
            lengths=list(lengths),
            positions=positions.to(device),
            cu_seqlens=cu.to(device),
            is_decode=all(n == 1 for n in lengths),
            slot_range=(slot_list[0], slot_list[0] + len(slot_list)) if consecutive else None,
            span=max(s + n for s, n in zip(starts, lengths, strict=True)),
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
