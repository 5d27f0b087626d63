"""Progress of one tool call, as the MCP client sees it: the `Reporter` sink and the rule that it only increases."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

Reporter = Callable[[float, str], Awaitable[None]]
"""Progress sink: (monotonically increasing progress, message)."""


def monotonic(report: Reporter | None) -> Reporter | None:
    """Progress must increase (MCP); a wait reports fractions and a generation token counts, so drop any step
    back instead of sending it."""
    if report is None:
        return None
    last = float("-inf")

    async def forward(progress: float, message: str) -> None:
        nonlocal last
        if progress > last:
            last = progress
            await report(progress, message)

    return forward
