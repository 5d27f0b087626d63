"""The engine cache's one owner, modelled on nano-vllm's BlockManager: which sequence holds which slot, which prefix
snapshots are kept (engine/prefix_cache.py) and within what budget.

It plans and never touches device memory. The scheduler asks it for a slot when it admits a sequence (the answer
names the snapshot to restore there, if any) and for a save when a prefill chunk ends at a snapshot point (room
is made in the budget then); both go into the step plan. The model runner performs them (engine/model_runner.py:
`fill_slots` before the forward, `take_snapshots` after it) and the scheduler hands the snapshots back here. When a
step fails, its planned saves are released, and a device out of memory empties the prefix cache first."""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence as Tokens
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from engine.cache import Cache, Snapshot
from engine.prefix_cache import PrefixCache
from engine.sequence import Sequence


@dataclass(eq=False)
class Restore:
    """A slot a sequence took this step: the runner copies the snapshot in, or with none starts it fresh."""

    seq: Sequence
    snapshot: Snapshot | None


@dataclass(eq=False)
class Save:
    """A snapshot the runner takes after this step's forward: the state of `slot`, which then holds `tokens`."""

    slot: int
    tokens: tuple[int, ...]


class CacheManager:
    def __init__(self, cache: Cache, prefix_cache: PrefixCache | None) -> None:
        self.num_slots = cache.num_slots
        self._snapshot_bytes = cache.snapshot_bytes  # the cache's geometry; its tensors are the runner's
        self.prefix_cache = prefix_cache
        self._free = list(range(cache.num_slots))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def prefix_budget_bytes(self) -> int:
        return self.prefix_cache.budget_bytes if self.prefix_cache is not None else 0

    # -- slots ------------------------------------------------------------------------------------------------
    def take_slot(self) -> int:
        if not self._free:
            raise RuntimeError("no free cache slot")
        self._free.sort()  # lowest first keeps running batches on consecutive slots (cheap views)
        return self._free.pop(0)

    def free_slot(self, slot: int) -> None:
        if slot in self._free or not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} is not in use")
        self._free.append(slot)

    @contextmanager
    def borrowed_slot(self) -> Iterator[int]:
        """A slot for one call between two steps (`LLM.logits`); the caller starts it fresh (`Cache.reset`)."""
        slot = self.take_slot()
        try:
            yield slot
        finally:
            self.free_slot(slot)

    def allocate(self, seq: Sequence) -> Restore:
        """Give `seq` a slot and the longest cached prefix of its prompt (counted as cached from now on: the step
        that restores it runs before any that reads it), and the prompt positions its prefill stops at for a
        snapshot."""
        seq.slot = self.take_slot()
        snapshot = None
        if self.prefix_cache is not None:
            snapshot = self.prefix_cache.lookup(seq.prompt_ids)
            if snapshot is not None:
                seq.num_cached = seq.num_prefix_hit = snapshot.length
            points = self.prefix_cache.snapshot_points(seq.prompt_ids, seq.num_cached)
            seq.snapshot_at, seq.later_snapshots = (points[0], points[1:]) if points else (None, [])
        return Restore(seq, snapshot)

    def deallocate(self, seq: Sequence) -> None:
        if seq.slot is not None:
            self.free_slot(seq.slot)
            seq.slot = None

    # -- the prefix cache ---------------------------------------------------------------------------------------
    def plan_save(self, tokens: Tokens[int], slot: int) -> Save | None:
        """A snapshot of `slot` once this step leaves exactly `tokens` in it, with room made for it in the budget
        now; None when there is nothing to take (no prefix cache, kept already, larger than the whole budget)."""
        if self.prefix_cache is None:
            return None
        key = tuple(tokens)
        if not self.prefix_cache.reserve(key, self._snapshot_bytes(len(key))):
            return None
        return Save(slot, key)

    def saved(self, save: Save, snapshot: Snapshot | None) -> None:
        """The runner took a planned snapshot; None: the device had no memory for it, and the prefix cache is the
        first thing to give back."""
        if self.prefix_cache is None:
            return
        if snapshot is None:
            self.prefix_cache.release(save.tokens)
            self.prefix_cache.clear()
        else:
            self.prefix_cache.keep(snapshot)

    def step_failed(self, saves: list[Save], exc: BaseException) -> None:
        """A step raised before its snapshots were taken: release them; out of memory, empty the prefix cache."""
        if self.prefix_cache is None:
            return
        for save in saves:
            self.prefix_cache.release(save.tokens)
        if isinstance(exc, torch.OutOfMemoryError):
            self.prefix_cache.clear()
