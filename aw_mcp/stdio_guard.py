"""Answering malformed stdio input. The SDK's stdio transport hands a line it cannot read to the server as an
exception, which the server only logs, so the client waits for its timeout; here each such line gets the JSON-RPC
answer HTTP would give: -32700 for text that is not JSON (or nested too deeply to read), -32600 for JSON that is
not one request (a batch array, a missing method)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def error_for(exc: Exception) -> types.JSONRPCError:
    """The JSON-RPC error answering the line that raised `exc`, with the request's id when it had one."""
    code, message, request_id = INVALID_REQUEST, "Invalid Request: not a single JSON-RPC message", None
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    if not isinstance(exc, ValidationError) or any(e["type"] == "json_invalid" for e in errors):
        code, message = PARSE_ERROR, "Parse error: the line is not JSON (or is nested too deeply)"
    elif errors:
        raw = errors[0].get("input")
        try:
            value = json.loads(raw) if isinstance(raw, str | bytes) else raw
        except (ValueError, RecursionError):
            value = None
        if (
            isinstance(value, dict)
            and isinstance(value.get("id"), int | str)
            and not isinstance(value["id"], bool)
        ):
            request_id = value["id"]
        if isinstance(value, list):
            message = "Invalid Request: batch arrays are not supported; send one message per line"
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


@asynccontextmanager
async def answer_malformed_lines(
    read_stream: MemoryObjectReceiveStream[SessionMessage | Exception],
    write_stream: MemoryObjectSendStream[SessionMessage],
) -> AsyncIterator[MemoryObjectReceiveStream[SessionMessage | Exception]]:
    """A read stream carrying only well-formed messages; every malformed one is answered on `write_stream`."""
    forward, checked = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def pump() -> None:
        async with forward:
            async for item in read_stream:
                if isinstance(item, Exception):
                    log.debug("malformed stdio input: %s", item)
                    await write_stream.send(SessionMessage(error_for(item)))
                    continue
                await forward.send(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        try:
            yield checked
        finally:
            tg.cancel_scope.cancel()
