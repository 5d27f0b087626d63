"""Which sequences run in the next step, and how many tokens each.

A step decodes one token for every sequence whose prompt is in the cache, and spends what is left of the token
budget (`max_num_batched_tokens`) on prompt chunks of the sequences still prefilling, oldest first. So a 30k-token
prompt loads over many steps while the others keep decoding, and a chunk always ends at its sequence's snapshot
position (where the prefix cache must copy the DeltaNet states). Waiting sequences take a cache slot in arrival
order as slots free up, with the longest cached prefix of their prompt.

The cache manager (engine/cache_manager.py) gives the slots and decides what to restore and what to keep; the plan
carries those copies to the model runner, which makes them, and `advance` hands the snapshots back."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.cache import Snapshot
from engine.cache_manager import CacheManager, Restore, Save
from engine.sequence import Sequence


@dataclass
class PrefillChunk:
    seq: Sequence
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length

    @property
    def completes_prompt(self) -> bool:
        return self.end == len(self.seq.prompt_ids)


@dataclass
class StepPlan:
    prefills: list[PrefillChunk] = field(default_factory=list)
    decodes: list[Sequence] = field(default_factory=list)
    restores: list[Restore] = field(default_factory=list)  # slots taken this step, filled before the forward
    saves: list[Save] = field(default_factory=list)  # snapshots taken after the forward

    @property
    def empty(self) -> bool:
        return not (self.prefills or self.decodes or self.restores)

    @property
    def sequences(self) -> list[Sequence]:
        """Every sequence the step touches: those it prefills or decodes, and those whose slot it fills."""
        stepped = [c.seq for c in self.prefills] + self.decodes
        return stepped + [r.seq for r in self.restores if r.seq not in stepped]


class Scheduler:
    def __init__(self, cache_manager: CacheManager, max_num_batched_tokens: int) -> None:
        if max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        self.cache_manager = cache_manager
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> StepPlan:
        restores = self._admit()
        decodes = sorted((s for s in self.running if not s.prefilling), key=lambda s: s.slot)
        budget = max(1, self.max_num_batched_tokens - len(decodes))
        prefills, saves = [], []
        for seq in sorted((s for s in self.running if s.prefilling), key=lambda s: s.arrival):
            if budget == 0:
                break
            length = min(seq.num_prompt_left, budget)
            if seq.snapshot_at is not None and seq.num_cached < seq.snapshot_at:
                length = min(length, seq.snapshot_at - seq.num_cached)
            chunk = PrefillChunk(seq, seq.num_cached, length)
            prefills.append(chunk)
            budget -= length
            if chunk.end == seq.snapshot_at:
                save = self.cache_manager.plan_save(seq.prompt_ids[: chunk.end], seq.slot)
                if save is not None:
                    saves.append(save)
        return StepPlan(prefills, decodes, restores, saves)

    def advance(self, plan: StepPlan, snapshots: list[Snapshot | None]) -> None:
        """The step ran: its tokens are in the cache, and the runner took the planned snapshots (None: no memory)."""
        for save, snapshot in zip(plan.saves, snapshots, strict=True):
            self.cache_manager.saved(save, snapshot)
        for chunk in plan.prefills:
            seq = chunk.seq
            seq.num_cached += chunk.length
            if seq.num_cached == seq.snapshot_at:
                seq.snapshot_at = seq.later_snapshots.pop(0) if seq.later_snapshots else None
        for seq in plan.decodes:
            seq.num_cached += 1

    def step_failed(self, plan: StepPlan, exc: BaseException) -> None:
        """The step raised: its sequences fail (the loop retires them); the snapshots it planned are not taken."""
        self.cache_manager.step_failed(plan.saves, exc)

    def retire(self, seq: Sequence) -> None:
        """A finished, aborted or failed sequence leaves at once and frees its slot."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.cache_manager.deallocate(seq)

    def _admit(self) -> list[Restore]:
        restores = []
        while self.waiting and self.cache_manager.num_free:
            seq = self.waiting.popleft()
            restores.append(self.cache_manager.allocate(seq))
            self.running.append(seq)
        return restores
