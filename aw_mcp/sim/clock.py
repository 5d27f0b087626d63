"""The simulator's two clocks in one injectable object: when a call starts (its record's `time`, which the
scorecard measures waits between) and how long it takes (`latency_ms`). A test drives a fake one instead of
sleeping through a Retry-After."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from aw_mcp.trajectory.records import utc_now


@dataclass(frozen=True)
class Clock:
    now: Callable[[], str] = utc_now  # UTC, ISO 8601 with milliseconds, as the trajectory writes it
    elapsed: Callable[[], float] = time.perf_counter  # seconds from any fixed point


SYSTEM_CLOCK = Clock()
