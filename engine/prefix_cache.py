"""Prefix cache for a hybrid model: snapshots of a slot's whole cache state at the end of a prompt prefix.

Attention layers could share KV by position, but a Gated DeltaNet layer's conv and recurrent state *at the end of
the prefix* cannot be recovered from a longer run: it has to be kept when the prefill passes that point. So the
scheduler ends a prefill chunk exactly at each snapshot position (`Sequence.snapshot_at`), and this cache copies
the slot's state there: KV of positions [0, L) of every attention layer, conv and recurrent state of every
DeltaNet layer. A later request whose tokens start with a snapshot's tokens gets the state copied into its slot
and prefills only the rest; restored == recomputed (the tests hold it to fp32 rounding).

Where to snapshot: chat prompts end in the generation prompt (`<|im_start|>assistant\\n...`), and call k of a
multi-turn session repeats call k-1's prompt up to (not including) that generation prompt, then adds the
observation and the next action. So the position of the last `<|im_start|>` is the snapshot point that every
following call hits; no session id is needed. The one before it (the start of the last user turn) is kept too: a
world shows per-step notes in the current turn only, so the next call's copy of that turn differs, and it restores
everything before it instead. Prompts without one snapshot at their last token but one.

Bounded by bytes, least recently used first out. A snapshot is a copy (one device memcpy of the prefix's KV,
~0.2 ms per 10k tokens on an H200), so restoring never aliases a slot that keeps decoding."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from engine.cache import Cache


@dataclass(eq=False)
class Snapshot:
    tokens: tuple[int, ...]
    keys: torch.Tensor  # [full layers, kv heads, L, head_dim]
    values: torch.Tensor
    conv: torch.Tensor  # [linear layers, conv_dim, width]
    recurrent: torch.Tensor  # [linear layers, HV, K, V] fp32

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values, self.conv, self.recurrent))


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
    def __init__(self, cache: Cache, budget_bytes: int, generation_start_id: int | None = None) -> None:
        self.cache = cache
        self.budget_bytes = max(0, int(budget_bytes))
        self.generation_start_id = generation_start_id  # `<|im_start|>`
        self._snapshots: OrderedDict[tuple[int, ...], Snapshot] = OrderedDict()  # LRU order, oldest first
        self._by_length: dict[int, set[tuple[int, ...]]] = {}
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

    def restore(self, snapshot: Snapshot, slot: int) -> int:
        """Copy the snapshot's state into `slot`; returns how many tokens are now cached there."""
        cache, length = self.cache, snapshot.length
        cache.keys[:, slot, :, :length].copy_(snapshot.keys)
        cache.values[:, slot, :, :length].copy_(snapshot.values)
        cache.conv[:, slot].copy_(snapshot.conv)
        cache.recurrent[:, slot].copy_(snapshot.recurrent)
        return length

    def save(self, ids: list[int], slot: int) -> bool:
        """Keep the state of `slot`, which holds exactly the tokens `ids`. False when it cannot fit."""
        key = tuple(ids)
        if key in self._snapshots:
            self._snapshots.move_to_end(key)
            return True
        cache, length = self.cache, len(ids)
        size = Cache.bytes_per_slot(cache.config, length, cache.keys.dtype) if length else 0
        if not length or size > self.budget_bytes:
            return False
        self._evict_until(self.budget_bytes - size)
        try:
            snapshot = Snapshot(
                key,
                cache.keys[:, slot, :, :length].clone(),
                cache.values[:, slot, :, :length].clone(),
                cache.conv[:, slot].clone(),
                cache.recurrent[:, slot].clone(),
            )
        except torch.OutOfMemoryError:
            self.clear()  # the device is short of memory: the cache is the first thing to give back
            return False
        self._snapshots[key] = snapshot
        self._by_length.setdefault(length, set()).add(key)
        self.used_bytes += snapshot.nbytes
        self.stats.saved += 1
        return True

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
