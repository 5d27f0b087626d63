"""Prefix cache for a hybrid model: snapshots of a slot's whole cache state at the end of a prompt prefix.

Attention layers could share KV by position, but a Gated DeltaNet layer's conv and recurrent state *at the end of
the prefix* cannot be recovered from a longer run: it has to be kept when the prefill passes that point. So the
scheduler ends a prefill chunk exactly at each snapshot position (`Sequence.snapshot_at`), and the slot's state
is copied there: KV of positions [0, L) of every attention layer, conv and recurrent state of every
DeltaNet layer. A later request whose tokens start with a snapshot's tokens gets the state copied into its slot
and prefills only the rest; restored == recomputed (the tests hold it to fp32 rounding).

Where to snapshot: chat prompts end in the generation prompt (`<|im_start|>assistant\\n...`), and call k of a
multi-turn session repeats call k-1's prompt up to (not including) that generation prompt, then adds the
observation and the next action. So the position of the last `<|im_start|>` is the snapshot point that every
following call hits; no session id is needed. The one before it (the start of the last user turn) is kept too: a
world shows per-step notes in the current turn only, so the next call's copy of that turn differs, and it restores
everything before it instead. Prompts without one snapshot at their last token but one.

Bounded by bytes, least recently used first out. This is the index and its budget, on the host: the cache manager
(engine/cache_manager.py) asks it what to restore and reserves room for a save when the scheduler plans one; the
model runner makes the copies (`Cache.snapshot` / `Cache.restore`: one device memcpy of the prefix's KV, ~0.2 ms per
10k tokens on an H200) and the snapshot it took is kept here after the step."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from engine.cache import Snapshot

__all__ = ["PrefixCache", "PrefixCacheStats", "Snapshot"]


@dataclass
class PrefixCacheStats:
    queries: int = 0  # lookups
    query_tokens: int = 0  # prompt tokens looked up
    hits: int = 0
    hit_tokens: int = 0  # prompt tokens restored instead of prefilled
    saved: int = 0
    evicted: int = 0

    @property
    def hit_rate(self) -> float:
        """Share of looked-up prompt tokens that came from the cache."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


class PrefixCache:
    def __init__(self, budget_bytes: int, generation_start_id: int | None = None) -> None:
        self.budget_bytes = max(0, int(budget_bytes))
        self.generation_start_id = generation_start_id  # `<|im_start|>`
        self._snapshots: OrderedDict[tuple[int, ...], Snapshot] = OrderedDict()  # LRU order, oldest first
        self._by_length: dict[int, set[tuple[int, ...]]] = {}
        self._reserved: dict[tuple[int, ...], int] = {}  # saves planned for this step, by tokens: their bytes
        self.used_bytes = 0
        self.stats = PrefixCacheStats()

    def __len__(self) -> int:
        return len(self._snapshots)

    def snapshot_points(self, ids: list[int], already: int = 0) -> list[int]:
        """Where to keep the state of a prompt, ascending: before its last two `<|im_start|>` (the last user turn
        and the generation prompt) when it has them, else before its last token; only points past `already` (a
        restored prefix). The earlier point matters when the next call renders the last user turn differently
        (a world's per-step notes are shown once, not kept in the history): that call still restores everything
        before it."""
        starts = []
        if self.generation_start_id is not None:
            for i in range(len(ids) - 1, -1, -1):
                if ids[i] == self.generation_start_id:
                    starts.append(i)
                    if len(starts) == 2:
                        break
        points = sorted(starts) if starts else [len(ids) - 1]
        return [p for p in points if already < p < len(ids)]

    def lookup(self, ids: list[int]) -> Snapshot | None:
        """The longest snapshot whose tokens start `ids`, leaving at least one token to prefill (its logits)."""
        self.stats.queries += 1
        self.stats.query_tokens += len(ids)
        for length in sorted(self._by_length, reverse=True):
            if length >= len(ids):
                continue
            key = tuple(ids[:length])
            if key in self._by_length[length]:
                snapshot = self._snapshots[key]
                self._snapshots.move_to_end(key)
                self.stats.hits += 1
                self.stats.hit_tokens += length
                return snapshot
        return None

    def reserve(self, tokens: tuple[int, ...], nbytes: int) -> bool:
        """Make room for a snapshot of `tokens` of `nbytes`, least recently used out first. False when none is to
        be taken: one is kept already (now the most recently used), one is planned, or it exceeds the budget."""
        if tokens in self._snapshots:
            self._snapshots.move_to_end(tokens)
            return False
        if not tokens or tokens in self._reserved or nbytes > self.budget_bytes:
            return False
        self._evict_until(self.budget_bytes - sum(self._reserved.values()) - nbytes)
        self._reserved[tokens] = nbytes
        return True

    def keep(self, snapshot: Snapshot) -> None:
        """A reserved snapshot, taken."""
        self._reserved.pop(snapshot.tokens, None)
        self._snapshots[snapshot.tokens] = snapshot
        self._by_length.setdefault(snapshot.length, set()).add(snapshot.tokens)
        self.used_bytes += snapshot.nbytes
        self.stats.saved += 1

    def release(self, tokens: tuple[int, ...]) -> None:
        """A reserved snapshot that was not taken (its step failed, or the device had no memory for it)."""
        self._reserved.pop(tokens, None)

    def clear(self) -> None:
        self._evict_until(0)

    def _evict_until(self, limit: int) -> None:
        while self._snapshots and self.used_bytes > limit:
            key, snapshot = self._snapshots.popitem(last=False)
            lengths = self._by_length[len(key)]
            lengths.discard(key)
            if not lengths:
                del self._by_length[len(key)]
            self.used_bytes -= snapshot.nbytes
            self.stats.evicted += 1
