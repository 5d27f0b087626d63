"""Applying fault kinds: waits, realistic error bodies, shape changes, injections, stale reads, catalog changes.

Every function here is deterministic given its inputs; the random draws come from `planner.uniform`, keyed by the
same (seed, perturbation, call index, tool, arguments) as the decision to fire.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import anyio

from aw_mcp.prompt.render import render_result
from aw_mcp.sim.answer import Answer, Skipped
from aw_mcp.sim.fault_planner import Firing, uniform
from aw_mcp.sim.progress import Reporter
from aw_mcp.spec.faults import (
    MAX_DELAY_MS,
    CatalogFault,
    EmptyFault,
    ErrorFault,
    InjectFault,
    LatencyFault,
    MalformedFault,
    OversizedFault,
    TruncateFault,
)
from aw_mcp.spec.injections import InjectionSlot
from aw_mcp.spec.world import ToolSpec

_HTTP_BODIES: dict[int, tuple[str, str]] = {
    400: ("BAD_REQUEST", "The request could not be processed: one or more parameters are invalid."),
    401: ("UNAUTHORIZED", "The access token has expired. Re-authenticate and retry the request."),
    403: (
        "FORBIDDEN",
        "The credentials used for this request have expired or do not grant access to {tool}.",
    ),
    404: ("NOT_FOUND", "The requested resource was not found."),
    409: ("CONFLICT", "The request conflicts with the current state of the resource."),
    429: ("RATE_LIMITED", "Rate limit exceeded for this API key."),
    500: ("INTERNAL_ERROR", "An unexpected error occurred while processing the request."),
    502: ("BAD_GATEWAY", "The upstream service returned an invalid response."),
    503: ("SERVICE_UNAVAILABLE", "The service is temporarily unavailable. Please retry later."),
    504: ("GATEWAY_TIMEOUT", "The upstream service did not respond in time."),
}

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def fill_template(template: str, values: dict[str, Any]) -> str:
    """`{name}` → the value; unknown placeholders stay as written (a typo shows rather than crashes)."""

    def sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            return match.group(0)
        value = values[key]
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _PLACEHOLDER.sub(sub, template)


# ---------------------------------------------------------------------------------------------------------------
# latency and hangs
# ---------------------------------------------------------------------------------------------------------------


def latency_ms(seed: int, fault: LatencyFault, firing: Firing, tool: str, arguments: dict[str, Any]) -> float:
    u1, u2, u3 = (uniform(seed, firing.name, firing.n, tool, arguments, f"latency{k}") for k in range(3))
    # A degrade ramp's scale has no bound of its own.
    return min(MAX_DELAY_MS, fault.sample_ms(u1, u2, u3) * firing.scale)


async def wait_with_progress(total_ms: float, every_ms: float, report: Reporter | None) -> None:
    """Sleep `total_ms`, reporting progress every `every_ms` so a client with a progress-reset timeout waits.

    Progress is the elapsed fraction in [0, 1): a generation's token counts (≥ 1) that follow stay increasing.
    """
    total_s = total_ms / 1000
    start = anyio.current_time()
    deadline = start + total_s
    while (left := deadline - anyio.current_time()) > 0:
        await anyio.sleep(min(left, every_ms / 1000))
        elapsed = anyio.current_time() - start
        if report is not None and elapsed < total_s:
            await report(
                elapsed / total_s * 0.999, f"waiting for the upstream ({elapsed:.1f}s of {total_s:.1f}s)"
            )


def timeout_text(tool: str, seconds: float) -> str:
    return f"Error: Request to {tool} timed out after {_seconds(seconds)}s"


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# ---------------------------------------------------------------------------------------------------------------
# error bodies
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorBody:
    text: str
    details: dict[str, Any]


def error_body(fault: ErrorFault, tool: ToolSpec, arguments: dict[str, Any]) -> ErrorBody:
    """The isError text a real API gateway would return for this fault."""
    values = {**arguments, "tool": tool.name}
    retry = fault.retry_after_s
    if fault.timeout_s is not None:
        code, status = "TIMEOUT", None
        message = fill_template(fault.message, values) if fault.message else None
        text_message = message or f"Request to {tool.name} timed out after {_seconds(fault.timeout_s)}s"
    elif fault.quota:
        code, status = "QUOTA_EXCEEDED", 429
        text_message = fill_template(
            fault.message or "The daily request quota for this API key is exhausted; it resets at 00:00 UTC.",
            values,
        )
    elif fault.declared is not None:
        declared = next(e for e in tool.errors if e.name == fault.declared)
        code, status = declared.name, declared.status
        text_message = fill_template(fault.message or declared.message, values)
    else:
        assert fault.status is not None
        status = fault.status
        default_code = re.sub(r"[^A-Z0-9]+", "_", _phrase(status).upper()).strip("_")
        code, default_message = _HTTP_BODIES.get(status, (default_code, f"The request failed ({status})."))
        text_message = fill_template(fault.message or default_message, values)
        if status == 429 and retry is None:
            retry = 30.0
    if retry is not None:
        text_message += f" Retry after {_seconds(retry)} seconds."
    details: dict[str, Any] = {"code": code}
    if status is not None:
        details["status"] = status
    if retry is not None:
        details["retry_after_s"] = retry
    if fault.format == "json":
        body: dict[str, Any] = {"code": code, "message": text_message}
        if status is not None:
            body = {"status": status, **body}
        if retry is not None:
            body["retry_after"] = retry
        return ErrorBody(json.dumps({"error": body}, ensure_ascii=False), details)
    if fault.timeout_s is not None:
        return ErrorBody(f"Error: {text_message}", details)
    if status is None:
        return ErrorBody(f"Error: {code}: {text_message}", details)
    phrase = "Quota Exceeded" if fault.quota else _phrase(status)
    return ErrorBody(f"Error: {status} {phrase} - {text_message}", details)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


# ---------------------------------------------------------------------------------------------------------------
# shape faults on an answer: what the agent sees changed, or Skipped when the fault cannot apply
# ---------------------------------------------------------------------------------------------------------------


def _map_lists(value: Any, change: Callable[[list[Any]], list[Any]]) -> tuple[Any, bool]:
    """Apply `change` to every list inside `value` (innermost first); also says whether there was any list."""
    if isinstance(value, dict):
        found = False
        out = {}
        for key, item in value.items():
            out[key], sub = _map_lists(item, change)
            found = found or sub
        return out, found
    if isinstance(value, list):
        inner = [_map_lists(item, change)[0] for item in value]
        return change(inner), True
    return value, False


def _fits(tool: ToolSpec, value: Any) -> bool:
    return tool.output_problem(value) is None


def _structured_change(
    tool: ToolSpec, answer: Answer, change: Callable[[list[Any]], list[Any]]
) -> Answer | Skipped:
    changed, found = _map_lists(answer.structured, change)
    if not found:
        return Skipped("the structured result has no list to change")
    if not _fits(tool, changed):
        return Skipped("the changed result would violate outputSchema, so it was left as it was")
    return Answer(render_result(changed), changed)


def truncate(fault: TruncateFault, tool: ToolSpec, answer: Answer) -> Answer | Skipped:
    if tool.structured and answer.structured is not None:
        return _structured_change(tool, answer, lambda xs: xs[: math.floor(len(xs) * fault.keep)])
    return Answer(answer.text[: max(1, math.floor(len(answer.text) * fault.keep))] if answer.text else "")


def empty(fault: EmptyFault, tool: ToolSpec, answer: Answer) -> Answer | Skipped:
    if tool.structured and answer.structured is not None:
        return _structured_change(tool, answer, lambda xs: [])
    return Answer("")


def oversized(fault: OversizedFault, tool: ToolSpec, answer: Answer) -> Answer | Skipped:
    if tool.structured and answer.structured is not None:
        size = max(1, len(json.dumps(answer.structured, ensure_ascii=False)))
        factor = math.ceil(fault.size_chars / size)
        return _structured_change(tool, answer, lambda xs: xs * factor if xs else xs)
    text = answer.text or "(empty)"
    copies = math.ceil(fault.size_chars / (len(text) + 1))
    return Answer("\n".join([text] * copies))


def malformed(fault: MalformedFault, tool: ToolSpec, answer: Answer) -> Answer:
    """JSON cut before it closes. A structured tool sends it as an isError result without structuredContent: MCP
    requires structuredContent that matches outputSchema on every non-error result, so invalid JSON can only
    reach the agent as error text (clients skip output validation for errors)."""
    text = answer.text if answer.structured is None else json.dumps(answer.structured, ensure_ascii=False)
    cut = text[: max(1, math.floor(len(text) * 0.6))].rstrip()
    try:
        json.loads(cut)
        cut = cut + ',"'  # still valid (e.g. a short number): make sure it no longer parses
    except json.JSONDecodeError:
        pass
    return Answer(cut, None, is_error=tool.structured)


def inject(
    fault: InjectFault,
    tool: ToolSpec,
    answer: Answer,
    slots: dict[str, InjectionSlot],
    values: dict[str, Any],
) -> Answer | Skipped:
    text = fill_template(fault.text if fault.text is not None else slots[fault.slot].text, values)

    def place(original: str) -> str:
        return f"{text}\n\n{original}" if fault.position == "start" else f"{original}\n\n{text}"

    if not (tool.structured and answer.structured is not None):
        return Answer(place(answer.text))
    path = fault.field.split(".") if fault.field else _longest_string(answer.structured)
    if path is None:
        return Skipped("the structured result has no string field to carry the injection")
    changed = json.loads(json.dumps(answer.structured))
    node = changed
    try:
        for key in path[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        last = int(path[-1]) if isinstance(node, list) else path[-1]
        if not isinstance(node[last], str):
            return Skipped(f"field {'.'.join(path)} is not a string")
        node[last] = place(node[last])
    except (KeyError, IndexError, ValueError, TypeError):
        return Skipped(f"the structured result has no field {'.'.join(path)}")
    if not _fits(tool, changed):
        return Skipped("the injected result would violate outputSchema, so it was left as it was")
    return Answer(render_result(changed), changed)


def _longest_string(value: Any, path: tuple[str, ...] = ()) -> list[str] | None:
    best: tuple[int, list[str]] | None = None

    def walk(node: Any, here: tuple[str, ...]) -> None:
        nonlocal best
        if isinstance(node, str):
            if best is None or len(node) > best[0]:
                best = (len(node), list(here))
        elif isinstance(node, dict):
            for key, item in node.items():
                walk(item, (*here, str(key)))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, (*here, str(i)))

    walk(value, path)
    return best[1] if best is not None and best[1] else None


# ---------------------------------------------------------------------------------------------------------------
# stale reads and the live catalog
# ---------------------------------------------------------------------------------------------------------------


def earlier_observation(
    records: Sequence[Any], tool: str, arguments: dict[str, Any], pick: str
) -> Any | None:
    """An earlier successful record of the same tool and arguments (`first` or `previous`), or None."""
    same = [
        r
        for r in records
        if r.tool == tool
        and r.arguments == arguments
        and r.observation is not None
        and r.error is None
        and not r.is_error
    ]
    if not same:
        return None
    same.sort(key=lambda r: r.index)
    return same[0] if pick == "first" else same[-1]


class Catalog:
    """The world's live tool list. Catalog faults change it for every client at once (MCP requires the list not
    to vary per connection); the world model's system prompt keeps the original definitions."""

    def __init__(self, tools: Sequence[ToolSpec]):
        self.tools: list[ToolSpec] = list(tools)
        self.applied: set[str] = set()
        self.added: dict[str, ToolSpec] = {}

    def get(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def copy(self) -> Catalog:
        """The same live list, changed independently from here on (a forked world)."""
        twin = Catalog(self.tools)
        twin.applied, twin.added = set(self.applied), dict(self.added)
        return twin

    def apply(self, name: str, fault: CatalogFault) -> dict[str, Any]:
        self.applied.add(name)
        removed = [n for n in fault.remove if self.get(n) is not None]
        self.tools = [t for t in self.tools if t.name not in fault.remove]
        for tool_name, description in fault.redescribe.items():
            self.tools = [
                t.model_copy(update={"description": description}) if t.name == tool_name else t
                for t in self.tools
            ]
        for entry in fault.add:
            tool = ToolSpec.model_validate(entry)
            self.tools.append(tool)
            self.added[tool.name] = tool
        return {
            "added": [e["name"] for e in fault.add],
            "removed": removed,
            "redescribed": sorted(fault.redescribe),
            "tools": [t.name for t in self.tools],
        }
