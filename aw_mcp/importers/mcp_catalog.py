"""`aw-mcp import mcp` / `tools-list`: an MCP server's tool catalog, live or saved, as a world.

Live imports connect as an ordinary client (stdio command or streamable HTTP URL), page through tools/list and, if
asked, call *read-only* tools with user-given arguments so real results become `examples`: the world model then
learns the real output format. Tools that are not marked read-only are never called, whatever the sample file
says, because importing must not change the real system.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from aw_mcp.importers.import_log import ImportLog, json_pointer
from aw_mcp.importers.world_file import (
    ImportFailure,
    check_schema,
    fit_output_schema,
    fit_tool,
    tool_name,
    unique_name,
)
from aw_mcp.spec.world import TOOL_NAME

ANNOTATION_KEYS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
MAX_PAGES = 1000  # a server that keeps handing out cursors is broken; stop rather than loop forever


@dataclass
class Catalog:
    """What a server said about itself: tools in wire form (camelCase) plus real sample results by tool name."""

    source: str
    tools: list[dict[str, Any]]
    server_name: str | None = None
    server_version: str | None = None
    instructions: str | None = None
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFailure(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ImportFailure(f"{path} is not JSON: {exc.msg} (line {exc.lineno})") from None


def read_tools_list(path: str | Path) -> Catalog:
    """`{"tools": [...]}`, a JSON-RPC response `{"result": {"tools": [...]}}`, or a bare list of tools."""
    data = _read_json(path)
    if isinstance(data, dict) and isinstance(data.get("result"), dict):
        data = data["result"]
    tools = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(tools, list):
        raise ImportFailure(
            f'{path}: expected {{"tools": [...]}}, {{"result": {{"tools": [...]}}}} or a list'
        )
    return Catalog(source=Path(path).name, tools=tools, server_name=Path(path).stem)


def load_samples(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    data = _read_json(path)
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ImportFailure(f'{path}: expected {{"tool_name": [{{arguments}}, ...], ...}}')
    return data


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def fetch_catalog(
    target: str | list[str], samples: dict[str, list[dict[str, Any]]], timeout_s: float, log: ImportLog
) -> Catalog:
    """Connect to a server (URL or stdio command line), snapshot its tools, call the sampled read-only tools."""
    from mcp import Client, StdioServerParameters

    server: Any = (
        target if isinstance(target, str) else StdioServerParameters(command=target[0], args=target[1:])
    )
    source = target if isinstance(target, str) else " ".join(target)
    try:
        async with Client(server, read_timeout_seconds=timeout_s) as client:
            tools = await list_all_tools(client)
            info = client.server_info
            catalog = Catalog(
                source=source,
                tools=tools,
                server_name=getattr(info, "name", None),
                server_version=getattr(info, "version", None),
                instructions=client.instructions,
            )
            catalog.samples = await _call_samples(client, tools, samples, log)
    except anyio.get_cancelled_exc_class():
        raise
    except ImportFailure:
        raise
    except Exception as exc:  # connection refused, server crashed, protocol error: one message, no traceback
        leaf = _leaf(exc)
        raise ImportFailure(
            f"could not import from MCP server {source}: {type(leaf).__name__}: {leaf}"
        ) from None
    return catalog


async def list_all_tools(client: Any) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ImportFailure(f"tools/list did not end after {MAX_PAGES} pages")


async def _call_samples(
    client: Any, tools: list[dict[str, Any]], samples: dict[str, list[dict[str, Any]]], log: ImportLog
) -> dict[str, list[dict[str, Any]]]:
    by_name = {t.get("name"): t for t in tools}
    results: dict[str, list[dict[str, Any]]] = {}
    for name, argument_sets in samples.items():
        where = f"--sample {name}"
        tool = by_name.get(name)
        if tool is None:
            log.warn(where, "the server has no tool of this name; not called")
            continue
        if (tool.get("annotations") or {}).get("readOnlyHint") is not True:
            log.warn(where, "not called: the tool is not marked read-only (annotations.readOnlyHint)")
            continue
        for i, arguments in enumerate(argument_sets):
            if not isinstance(arguments, dict):
                log.warn(f"{where}[{i}]", "arguments must be a JSON object; not called")
                continue
            result = await client.call_tool(name, arguments)
            text = "\n".join(getattr(block, "text", "") for block in result.content if hasattr(block, "text"))
            if result.is_error:
                log.warn(f"{where}[{i}]", f"the call returned an error, not kept as an example: {text[:200]}")
                continue
            value = result.structured_content if result.structured_content is not None else text
            results.setdefault(name, []).append({"arguments": arguments, "result": value})
    return results


def _annotations(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    kept = {k: raw[k] for k in ANNOTATION_KEYS if k in raw and raw[k] is not None}
    return kept or None


def _input_schema(raw: Any, log: ImportLog, pointer: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        log.warn(pointer, "inputSchema missing or not an object; the tool takes free-form arguments")
        return {"type": "object"}
    if "type" not in raw:
        return {"type": "object", **raw}  # MCP allows leaving it implicit; the world spec wants it explicit
    return raw


def _output_schema(raw: Any, log: ImportLog, pointer: str) -> tuple[dict[str, Any] | None, str | None]:
    if raw is None:
        return None, None
    problem = check_schema(raw)
    if problem is not None:
        log.warn(pointer, f"outputSchema is not valid JSON Schema ({problem}); dropped")
        return None, None
    schema, wrapper = fit_output_schema(raw)
    if wrapper is not None:
        log.warn(pointer, f"outputSchema root is not an object; wrapped under {wrapper!r} (outputWrapper)")
    return schema, wrapper


def _example_result(value: Any, structured: bool) -> Any:
    """A structured tool whose sample came back as text only: the text is usually the JSON itself."""
    if structured and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def world_from_catalog(catalog: Catalog, log: ImportLog) -> dict[str, Any]:
    taken: set[str] = set()
    # Tools whose real names are valid keep them; a renamed tool must not take a name a later tool really has.
    real_names = {
        w["name"]
        for w in catalog.tools
        if isinstance(w, dict) and isinstance(w.get("name"), str) and TOOL_NAME.fullmatch(w["name"])
    }
    tools = []
    for i, wire in enumerate(catalog.tools):
        pointer = json_pointer("tools", i)
        if not isinstance(wire, dict) or not isinstance(wire.get("name"), str):
            log.warn(pointer, "a tool needs a string `name`; skipped")
            continue
        raw_name = wire["name"]
        if raw_name in real_names and raw_name not in taken:
            name = unique_name(raw_name, taken)
        else:
            name = unique_name(tool_name(raw_name), taken | real_names)
            taken.add(name)
        if name != raw_name:
            log.warn(pointer, f"tool name {raw_name!r} is not a valid unique tool name; imported as {name!r}")
        output, wrapper = _output_schema(wire.get("outputSchema"), log, pointer)
        examples = [
            {"arguments": s["arguments"], "result": _example_result(s["result"], output is not None)}
            for s in catalog.samples.get(raw_name, [])
        ]
        tool = {
            "name": name,
            "title": wire.get("title"),
            "description": wire.get("description") or "",
            "inputSchema": _input_schema(wire.get("inputSchema"), log, pointer),
            "outputSchema": output,
            "outputWrapper": wrapper,
            "annotations": _annotations(wire.get("annotations")),
            "examples": examples,
        }
        fitted = fit_tool(tool, log, pointer)
        if fitted is not None:
            tools.append(fitted)
    if not tools:
        raise ImportFailure(f"{catalog.source}: no tool could be imported (see the warnings)")
    label = catalog.server_name or "mcp-server"
    version = f" {catalog.server_version}" if catalog.server_version else ""
    description = (
        f"A simulated copy of the MCP server {label}{version} (tools snapshot from {catalog.source})."
    )
    if catalog.instructions:
        description += "\n\n" + catalog.instructions.strip()
    return {
        "name": re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "mcp-server",
        "description": description,
        "domain": "mcp",
        "tools": tools,
    }
