"""Compiled kernels' stats by `cache_key`, kept in JSON files: the local cache (written as results arrive, so an
interrupted run keeps what it compiled) and read-only seeds (a committed file of the last full run)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from engine.kernels.aot.compile import KernelStats


def read(path: Path) -> dict[str, KernelStats]:
    if not path.is_file():
        return {}
    return {k: KernelStats(**v) for k, v in json.loads(path.read_text()).items()}


def write(path: Path, entries: dict[str, KernelStats]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps({k: asdict(v) for k, v in sorted(entries.items())}, indent=0, sort_keys=True) + "\n"
    )
    tmp.replace(path)


class Store:
    """Seeds, then the cache, for lookups; new results go to the cache (flushed every `flush_s` seconds and at
    the end). `path` None: nothing is read or written besides the seeds."""

    def __init__(self, path: Path | None, seeds: Sequence[Path] = (), flush_s: float = 30.0) -> None:
        self.path = path
        self.entries: dict[str, KernelStats] = {}
        for seed in seeds:
            self.entries.update(read(seed))
        if path is not None:
            self.entries.update(read(path))
        self._fresh: dict[str, KernelStats] = {}
        self._flush_s = flush_s
        self._flushed = time.monotonic()

    def get(self, key: str) -> KernelStats | None:
        return self.entries.get(key)

    def put(self, key: str, stats: KernelStats) -> None:
        self.entries[key] = stats
        if not stats.error:  # errors are compiled again next time: they may depend on the machine
            self._fresh[key] = stats
        if time.monotonic() - self._flushed > self._flush_s:
            self.flush()

    def flush(self) -> None:
        if self.path is not None and self._fresh:
            write(self.path, {**read(self.path), **self._fresh})
            self._fresh = {}
        self._flushed = time.monotonic()
