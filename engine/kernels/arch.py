"""Which card a kernel launch is configured for, and what that card allows.

Launch configurations (tile sizes, warps, pipeline stages) that cannot fit every card are looked up by compute
capability (`cc`: 10 * major + minor, e.g. 90 for an H100/H200, 89 for an RTX 4090/L40S, 86 for an RTX 3090/A10,
120 for an RTX 5090). A wrapper asks `launch_arch(tensor.device)`: the CUDA device's capability, or the one a
caller forced with `target_arch(cc)` (the ahead-of-time compile check `engine/kernels/aot`, and CPU tests of the
per-arch tables). Off a GPU, with nothing forced, it answers `DEFAULT_ARCH`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache

import torch

DEFAULT_ARCH = 90
# Shared memory one block may use (the opt-in maximum, bytes), from the CUDA programming guide's table of
# compute capabilities: A100 163 KB, H100/H200/B200 227 KB, the consumer cards 99 KB.
_SHARED_MEMORY_PER_BLOCK = {80: 166_912, 86: 101_376, 87: 166_912, 89: 101_376, 90: 232_448, 100: 232_448}
_CONSUMER_SHARED = 101_376

_forced: ContextVar[int | None] = ContextVar("aw_target_arch", default=None)


def shared_memory_per_block(cc: int) -> int:
    """Bytes of shared memory a block may use on a card of capability `cc` (sm_120/121 and unknown: 99 KB)."""
    return _SHARED_MEMORY_PER_BLOCK.get(cc, _CONSUMER_SHARED)


def has_large_shared_memory(cc: int) -> bool:
    """A data-center card (A100, H100/H200, B200): more than the consumer cards' 99 KB per block."""
    return shared_memory_per_block(cc) > _CONSUMER_SHARED


def launch_arch(device: torch.device) -> int:
    """The capability launches on `device` are configured for."""
    forced = _forced.get()
    if forced is not None:
        return forced
    if device.type == "cuda":
        return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device())
    return DEFAULT_ARCH


@cache
def _cuda_capability(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return 10 * major + minor


@contextmanager
def target_arch(cc: int) -> Iterator[None]:
    """Configure every launch inside the block for capability `cc`, whatever the device."""
    token = _forced.set(cc)
    try:
        yield
    finally:
        _forced.reset(token)
