"""Which sequences run in the next step, and how many tokens each.

A step decodes one token for every sequence whose prompt is in the cache, and spends what is left of the token
budget (`max_num_batched_tokens`) on prompt chunks of the sequences still prefilling, oldest first. So a 30k-token
prompt loads over many steps while the others keep decoding, and a chunk always ends at its sequence's snapshot
position (where the prefix cache must copy the DeltaNet states). Waiting sequences take a cache slot in arrival
order as slots free up; admission restores the longest cached prefix into the slot."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.cache import Cache
from engine.prefix_cache import PrefixCache
from engine.sequence import Sequence


@dataclass
class PrefillChunk:
    seq: Sequence
    start: int
    length: int

    @property
    def completes_prompt(self) -> bool:
        return self.start + self.length == len(self.seq.prompt_ids)


@dataclass
class StepPlan:
    prefills: list[PrefillChunk] = field(default_factory=list)
    decodes: list[Sequence] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.prefills and not self.decodes

    @property
    def sequences(self) -> list[Sequence]:
        return [c.seq for c in self.prefills] + self.decodes


class Scheduler:
    def __init__(self, cache: Cache, prefix_cache: PrefixCache | None, max_num_batched_tokens: int) -> None:
        if max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        self.cache = cache
        self.prefix_cache = prefix_cache
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> StepPlan:
        self._admit()
        decodes = sorted((s for s in self.running if not s.prefilling), key=lambda s: s.slot)
        budget = max(1, self.max_num_batched_tokens - len(decodes))
        prefills = []
        for seq in sorted((s for s in self.running if s.prefilling), key=lambda s: s.arrival):
            if budget == 0:
                break
            length = min(seq.num_prompt_left, budget)
            if seq.snapshot_at is not None and seq.num_cached < seq.snapshot_at:
                length = min(length, seq.snapshot_at - seq.num_cached)
            prefills.append(PrefillChunk(seq, seq.num_cached, length))
            budget -= length
        return StepPlan(prefills, decodes)

    def advance(self, plan: StepPlan) -> None:
        """The step ran: its tokens are in the cache. Keep a snapshot where a chunk ended at one."""
        for chunk in plan.prefills:
            seq = chunk.seq
            seq.num_cached += chunk.length
            if self.prefix_cache is not None and seq.num_cached == seq.snapshot_at:
                self.prefix_cache.save(seq.prompt_ids[: seq.snapshot_at], seq.slot)
                seq.snapshot_at = seq.later_snapshots.pop(0) if seq.later_snapshots else None
        for seq in plan.decodes:
            seq.num_cached += 1

    def retire(self, seq: Sequence) -> None:
        """A finished, aborted or failed sequence leaves at once and frees its slot."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if seq.slot is not None:
            self.cache.free(seq.slot)
            seq.slot = None

    def _admit(self) -> None:
        while self.waiting and self.cache.num_free:
            seq = self.waiting.popleft()
            seq.slot = self.cache.allocate()
            if self.prefix_cache is not None:
                snapshot = self.prefix_cache.lookup(seq.prompt_ids)
                if snapshot is not None:
                    seq.num_cached = seq.num_prefix_hit = self.prefix_cache.restore(snapshot, seq.slot)
                points = self.prefix_cache.snapshot_points(seq.prompt_ids, seq.num_cached)
                seq.snapshot_at, seq.later_snapshots = (points[0], points[1:]) if points else (None, [])
            self.running.append(seq)
