"""One request's life in the engine: its tokens, where it stands in the cache, its text so far, and the outbox
its caller reads. Written by the step loop only; the caller reads it after the request finished."""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.sampling import SamplingParams
from engine.structured import Constraint

StopCheck = threading.Event | Callable[[], bool] | None
OutputSink = Callable[[Any], None]  # receives StreamDelta items, then None (done) or an exception

_arrivals = itertools.count()


@dataclass
class StreamDelta:
    """New text and token ids of one request since the previous delta."""

    request_id: str
    text: str
    token_ids: list[int]
    num_generated: int
    finished: bool = False
    finish_reason: str | None = None
    num_cached_tokens: int = 0  # prompt tokens restored from the prefix cache


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt: str | None
    prompt_ids: list[int]
    params: SamplingParams
    generator: random.Random | None  # engine/sampling.make_generator; None when greedy
    in_thinking: bool
    stop: StopCheck = None
    sink: OutputSink | None = None  # where the loop hands deltas; a queue's put by default
    snapshot_at: int | None = None  # the next prompt position whose cache state the prefix cache keeps
    later_snapshots: list[int] = field(default_factory=list)  # the ones after it, ascending
    constraint: Constraint | None = None  # schema-constrained answer (engine/structured.py)
    arrival: int = field(default_factory=lambda: next(_arrivals))
    arrival_time: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    slot: int | None = None
    num_cached: int = 0  # tokens whose cache state is in the slot
    num_prefix_hit: int = 0  # of those, restored from the prefix cache
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted_chars: int = 0
    emitted_ids: int = 0
    thinking_tokens: int = 0
    prefix_offset: int = 0
    read_offset: int = 0
    finish_reason: str | None = None  # "stop", "length", "abort" or "error"
    abort_requested: bool = False
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    # Repetition penalty only: which token ids the prompt and output hold (bool [vocab], built on first use) and how
    # many output ids are already marked in it.
    seen_tokens: torch.Tensor | None = None
    seen_outputs: int = 0

    def __post_init__(self) -> None:
        if self.sink is None:
            self.sink = self.outbox.put

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def prefilling(self) -> bool:
        """Prompt tokens remain to be put through the model."""
        return self.num_cached < len(self.prompt_ids)

    @property
    def num_prompt_left(self) -> int:
        return len(self.prompt_ids) - self.num_cached

    def stop_requested(self) -> bool:
        if self.abort_requested:
            return True
        if self.stop is None:
            return False
        if isinstance(self.stop, threading.Event):
            return self.stop.is_set()
        return bool(self.stop())
