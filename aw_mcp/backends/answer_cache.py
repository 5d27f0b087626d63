"""An answer cache in front of any world-model backend (`--cache DIR`).

A call's answer is stored under the hash of everything that decides it: the model, the sampling settings (seed
included: the simulator derives one per call and attempt from the world's seed) and the exact messages. Rerunning
the same agent on the same world then replays every answer byte for byte without a model server; a miss asks the
model and stores its answer, or, with `--cache-mode replay-only` (CI without a GPU), is a clear error for that call.

What a file holds: the answer (text, reasoning, finish reason, token counts) with every known secret redacted,
and the tool it answered, for a person looking in the folder; never the messages or a key. Files are owner-only
and written whole (a temporary file renamed over the key), so a reader never sees half an answer; within a process
one request per key asks the model and the others wait for its answer. The folder is bounded: past
`max_bytes`, the least recently used answers go first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Literal

import anyio

from aw_mcp.backends.contract import WorldModel
from aw_mcp.core.model_io import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)
from aw_mcp.core.private_files import write_private_text
from aw_mcp.core.redaction import redact_secrets

log = logging.getLogger(__name__)

CacheMode = Literal["read-write", "replay-only"]
CACHE_MODES: tuple[CacheMode, ...] = ("read-write", "replay-only")
DEFAULT_CACHE_MAX_BYTES = 1024**3
FORMAT_VERSION = 1
_SUFFIX = ".json"


class CacheMiss(BackendError):
    """`replay-only` and the cache has no answer for this request: the call fails with this message."""


def answer_key(model: str, messages: list[ChatMessage], params: GenerationParams) -> str:
    """The hex digest naming one request's answer: model, every sampling setting and the exact messages."""
    document = {
        "v": FORMAT_VERSION,
        "model": model,
        "params": dataclasses.asdict(params),
        "messages": messages,
    }
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class AnswerStore:
    """The folder of answers: one JSON file per key, in 256 shards by the key's first two hex digits."""

    def __init__(self, folder: str | Path, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError(f"--cache-max-bytes {max_bytes}: expected a positive number of bytes")
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # the size bookkeeping; file writes are atomic on their own
        self.folder.mkdir(parents=True, exist_ok=True)
        self._bytes = sum(size for _, size, _ in self._entries())

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}{_SUFFIX}"

    def get(self, key: str) -> Generation | None:
        path = self.path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # a damaged file is a miss, not a failed call
            log.warning("answer cache: %s unreadable (%s); asking the model again", path, exc)
            return None
        if (
            not isinstance(data, dict)
            or data.get("v") != FORMAT_VERSION
            or not isinstance(data.get("text"), str)
        ):
            return None
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass
        return Generation(
            text=data["text"],
            reasoning=data.get("reasoning") or "",
            finish_reason=data.get("finish_reason"),
            prompt_tokens=data.get("prompt_tokens"),
            completion_tokens=data.get("completion_tokens"),
            extra={"answered_by": "cache"},
        )

    def put(self, key: str, generation: Generation, call: CallRef | None) -> None:
        document: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "tool": call.tool if call is not None else None,
            "text": redact_secrets(generation.text),
            "reasoning": redact_secrets(generation.reasoning),
            "finish_reason": generation.finish_reason,
            "prompt_tokens": generation.prompt_tokens,
            "completion_tokens": generation.completion_tokens,
        }
        text = json.dumps(document, ensure_ascii=False)
        path = self.path(key)
        partial = path.with_name(f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
        old_size = path.stat().st_size if path.exists() else 0
        write_private_text(partial, text)
        os.replace(partial, path)
        with self._lock:
            self._bytes += len(text.encode("utf-8", "surrogatepass")) - old_size
            over = self._bytes > self.max_bytes
        if over:
            self._evict()

    def _entries(self) -> list[tuple[Path, int, float]]:
        found = []
        for shard in self.folder.iterdir():
            if not shard.is_dir():
                continue
            for entry in os.scandir(shard):
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith("."):
                    stat = entry.stat()
                    found.append((Path(entry.path), stat.st_size, stat.st_mtime))
        return found

    def _evict(self) -> None:
        """Least recently used first, down to 90% of the bound (so each write does not evict again)."""
        entries = sorted(self._entries(), key=lambda item: item[2])
        total = sum(size for _, size, _ in entries)
        target = int(self.max_bytes * 0.9)
        for path, size, _ in entries:
            if total <= target:
                break
            try:
                path.unlink()
                total -= size
            except FileNotFoundError:
                total -= size
        with self._lock:
            self._bytes = total


class CachedWorldModel(WorldModel):
    """`inner` behind the answer store. `inner` is None in replay-only mode: no model is opened at all."""

    def __init__(
        self, inner: WorldModel | None, store: AnswerStore, model: str, mode: CacheMode = "read-write"
    ) -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"--cache-mode {mode!r}: expected one of {', '.join(CACHE_MODES)}")
        if inner is None and mode != "replay-only":
            raise ValueError("a read-write answer cache needs a backend to ask on a miss")
        self.inner = inner
        self.store = store
        self.model = model
        self.mode = mode
        self.name = f"cache({inner.name})" if inner is not None else "cache(replay-only)"
        self.hits = 0
        self.misses = 0
        self._key_locks: dict[str, anyio.Lock] = {}

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        key = answer_key(self.model, messages, params)
        lock = self._key_locks.setdefault(key, anyio.Lock())
        try:
            async with lock:  # one request per key asks the model; the others then read its answer
                cached = await anyio.to_thread.run_sync(self.store.get, key)
                if cached is not None:
                    self.hits += 1
                    return cached
                self.misses += 1
                if self.inner is None:
                    what = f"{call.tool} (call {call.index + 1})" if call is not None else "this request"
                    raise CacheMiss(
                        f"the answer cache {self.store.folder} has no answer for {what} and --cache-mode is "
                        "replay-only. Record it first: run once with --cache-mode read-write and a model "
                        "(--base-url or --backend local), then replay"
                    )
                generation = await self.inner.generate(messages, params, on_progress, call)
                await anyio.to_thread.run_sync(self.store.put, key, generation, call)
                return generation
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._key_locks.pop(key, None)

    async def preload(self) -> bool:
        return await self.inner.preload() if self.inner is not None else False

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()
