"""Every JSON-RPC message is checked as raw text before the SDK sees it, and a malformed one gets its JSON-RPC
error here, with the request's id whenever it can be read.

Left to the SDK, a line its stdio transport cannot read reaches the server as an exception that is only logged,
and a request whose id is not a string or an integer (`null`, `1.5`, `true`, `{}`, `[1]`) is read as a
notification and never answered; over HTTP its 2025 transport answers the latter with a bare 202 and a malformed
shape with -32602. `check_message` decides for both transports (`http_guard.CheckJsonRpcBodies` uses it for POST
bodies):

- -32700, `id: null`: not JSON.
- -32600, `id: null`: JSON that is not one message object (a batch array, a scalar), a request whose id is not a
  string or an integer, or a malformed notification (it has no id to echo).
- -32600 with the id: a request whose envelope is wrong (`jsonrpc` not "2.0", `method` not a string, `params`
  not an object, no `method`).
- -32602 with the id: `params` holding what this server cannot take: a lone UTF-16 surrogate (`"\\ud800"`), a
  number of more than 4,300 digits, nesting deeper than 128 levels.

A malformed response (a message with `result` or `error`) is answered with `id: null`: its id belongs to the
server's own requests, so echoing it could fail one of the client's. A notification (a well-formed envelope with
no id) is never answered, even when its params cannot be read (a 5,000-digit `requestId`): `check_message` says
None, and the message is dropped (over HTTP: 202, as for any notification); neither is a blank line. A line that
is not UTF-8 is -32700 on stdio as over HTTP (it was decoded with U+FFFD before, which changed the id it answered
with). `checked_stdio_server` is the SDK's `stdio_server` with its stdin reader
replaced by one that checks each line this way.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from io import TextIOWrapper
from itertools import accumulate
from typing import Any, BinaryIO

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

MAX_DEPTH = 128  # levels of nesting in one message (the SDK's own JSON reader gives up near 200)
MAX_NUMBER_DIGITS = 4300  # digits before the point: the SDK's JSON reader, and CPython's int(), take no more
NOT_UTF8 = "Parse error: the message is not UTF-8"
THREAD_CHARS = 64 * 1024  # a message this long is checked in a worker thread, off the event loop
_SHALLOW_TOKENS = 200_000  # a too-deep message is read this far for its id

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)  # an unterminated string runs to the end
# A digit run this long: the numbers need the hooks below (also under a lower PYTHONINTMAXSTRDIGITS).
_LONG_DIGITS = re.compile(
    rf"\d{{{min(MAX_NUMBER_DIGITS, sys.get_int_max_str_digits() or MAX_NUMBER_DIGITS) + 1}}}"
)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
# A \u escape of a surrogate that is not half of a pair (a pre-filter: an escaped backslash can fool it)
_LONE_SURROGATE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_TOKEN = re.compile(r'\s*("[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+)', re.S)


class _BigNumber:
    """A number literal the SDK could not read, kept as its digit count."""

    def __init__(self, literal: str) -> None:
        self.digits = len(re.split(r"[.eE]", literal.lstrip("-"), maxsplit=1)[0])


def _parse_int(literal: str) -> int | _BigNumber:
    if len(literal) - literal.startswith("-") > MAX_NUMBER_DIGITS:
        return _BigNumber(literal)
    try:
        return int(literal)
    except ValueError:  # a lower PYTHONINTMAXSTRDIGITS
        return _BigNumber(literal)


def _parse_float(literal: str) -> float | _BigNumber:
    number = _BigNumber(literal)
    return number if number.digits > MAX_NUMBER_DIGITS else float(literal)


def refusal(code: int, message: str, request_id: types.RequestId | None = None) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


def nesting_depth(text: str) -> int:
    """How deeply the containers of a JSON text nest (brackets inside strings do not count)."""
    if "[" not in text and "{" not in text:
        return 0
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _usable_id(value: Any) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is None
    return isinstance(value, int) and not isinstance(value, bool)


def _answer_id(members: dict[str, Any], keys: set[str]) -> types.RequestId | None:
    """The id an error answer echoes: a request's, when it is a string or an integer. A response's id is the
    server's own, and a notification has none."""
    if "method" not in keys and ("result" in keys or "error" in keys):
        return None
    value = members.get("id")
    return value if _usable_id(value) else None


def _path_text(path: list[str | int]) -> str:
    parts = []
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        else:
            name = json.dumps(step[:40] + ("…" if len(step) > 40 else ""))  # ASCII: \u escapes for the rest
            parts.append(f".{name[1:-1]}" if re.fullmatch(r'"[A-Za-z_][\w-]*"', name) else f"[{name}]")
    text = "".join(parts).lstrip(".")
    return text if len(text) <= 200 else text[:200] + "…"


def _unreadable(doc: Any, *, surrogates: bool) -> tuple[list[str | int], str] | None:
    """The first value (depth-first, iterative) the SDK cannot take: a number too long, or, when `surrogates`, a
    string or key holding a lone surrogate; with its path."""
    stack: list[tuple[list[str | int], Any]] = [([], doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _BigNumber):
            return path, f"is a number of {value.digits:,} digits (at most {MAX_NUMBER_DIGITS:,})"
        if isinstance(value, str):
            if surrogates and _SURROGATE.search(value):
                return path, "holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not a character"
        elif isinstance(value, dict):
            for key in reversed(list(value)):
                if surrogates and _SURROGATE.search(key):
                    return [*path, key], "is a key holding a lone UTF-16 surrogate, which is not a character"
                stack.append(([*path, key], value[key]))
        elif isinstance(value, list):
            stack.extend(([*path, i], item) for i, item in reversed(list(enumerate(value))))
    return None


def _top_level_scalars(text: str) -> tuple[dict[str, Any], set[str], str | None] | None:
    """For a message too deep to parse: its top-level object's scalar members, every key seen, and the key whose
    value nests too deeply; None when the text does not start as an object. Reads at most _SHALLOW_TOKENS tokens."""
    tokens = _TOKEN.finditer(text)
    first = next(tokens, None)
    if first is None or first.group(1) != "{":
        return None
    members: dict[str, Any] = {}
    keys: set[str] = set()
    depth, key, value_next, deep_key = 1, None, False, None
    for count, match in enumerate(tokens):
        token = match.group(1)
        if count > _SHALLOW_TOKENS:
            break
        if token in ("{", "["):
            depth += 1
            if depth > MAX_DEPTH and deep_key is None:
                deep_key = key
            value_next = False
        elif token in ("}", "]"):
            depth -= 1
            if depth == 0:
                break
        elif depth == 1:
            if token == ":":
                value_next = True
            elif token == ",":
                key, value_next = None, False
            elif value_next and key is not None:
                try:
                    members[key] = json.loads(token, parse_int=_parse_int, parse_float=_parse_float)
                except ValueError:
                    pass
                value_next = False
            elif token.startswith('"'):
                try:
                    key = json.loads(token)
                except ValueError:
                    key = None
                if isinstance(key, str):
                    keys.add(key)
    return members, keys, deep_key


def _check_too_deep(text: str) -> types.JSONRPCError:
    shallow = _top_level_scalars(text)
    deep = f"nested more than {MAX_DEPTH} levels deep"
    if shallow is None:
        return refusal(INVALID_REQUEST, f"Invalid Request: not one JSON-RPC message object, and {deep}")
    members, keys, deep_key = shallow
    request_id = _answer_id(members, keys)
    if deep_key == "params" and request_id is not None and isinstance(members.get("method"), str):
        return refusal(INVALID_PARAMS, f"Invalid params: {deep}", request_id)
    return refusal(INVALID_REQUEST, f"Invalid Request: the message is {deep}", request_id)


def check_message(raw: str | bytes) -> types.JSONRPCMessage | types.JSONRPCError | None:
    """The message a line or body carries, the JSON-RPC error that answers it, or None for a notification this
    server cannot read (never answered; see the module docstring)."""
    if isinstance(raw, bytes | bytearray):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return refusal(PARSE_ERROR, NOT_UTF8)
    else:
        text = raw
    if nesting_depth(text) > MAX_DEPTH:
        return _check_too_deep(text)
    long_numbers = _LONG_DIGITS.search(text) is not None  # else the C parser's own int/float will do
    hooks: dict[str, Any] = {"parse_int": _parse_int, "parse_float": _parse_float} if long_numbers else {}
    try:
        doc = json.loads(text, **hooks)
    except (ValueError, RecursionError):
        return refusal(PARSE_ERROR, "Parse error: the message is not JSON")
    if isinstance(doc, list):
        return refusal(
            INVALID_REQUEST, "Invalid Request: batch arrays are not supported; send one message at a time"
        )
    if not isinstance(doc, dict):
        return refusal(INVALID_REQUEST, "Invalid Request: a message is a JSON object")
    keys = set(doc)
    is_request = "method" in keys or not ("result" in keys or "error" in keys)
    if is_request and "id" in keys and not _usable_id(doc["id"]):
        return refusal(
            INVALID_REQUEST,
            f"Invalid Request: id must be a string or an integer (of at most {MAX_NUMBER_DIGITS:,} digits)",
        )
    request_id = _answer_id(doc, keys)
    if doc.get("jsonrpc") != "2.0":
        return refusal(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', request_id)
    if is_request:
        if "method" not in keys:
            return refusal(INVALID_REQUEST, 'Invalid Request: no "method"', request_id)
        if not isinstance(doc["method"], str):
            return refusal(INVALID_REQUEST, 'Invalid Request: "method" must be a string', request_id)
        if doc.get("params") is not None and not isinstance(doc["params"], dict):
            return refusal(
                INVALID_REQUEST, 'Invalid Request: "params" must be an object (named parameters)', request_id
            )
    notification = is_request and "id" not in keys  # its envelope is well formed: it must not be answered
    surrogates = _LONE_SURROGATE_ESCAPE.search(text) is not None or _SURROGATE.search(text) is not None
    problem = _unreadable(doc, surrogates=surrogates) if surrogates or long_numbers else None
    if problem is not None and notification:
        return None
    if problem is not None:
        path, what = problem
        if is_request and path[0] == "params":
            return refusal(INVALID_PARAMS, f"Invalid params: {_path_text(path)} {what}", request_id)
        return refusal(INVALID_REQUEST, f"Invalid Request: {_path_text(path)} {what}", request_id)
    try:
        return types.jsonrpc_message_adapter.validate_python(doc, by_name=False)
    except ValidationError as exc:
        if notification:
            return None
        if not is_request:
            detail = (
                "a malformed response (result must be an object; error needs an integer code and a message)"
            )
            return refusal(INVALID_REQUEST, f"Invalid Request: {detail}")
        first = exc.errors()[0] if exc.errors() else {}
        where = _path_text([step for step in first.get("loc", ()) if isinstance(step, str | int)][1:])
        detail = f"{where}: {first.get('msg', 'invalid')}" if where else "not a valid JSON-RPC request"
        return refusal(INVALID_REQUEST, f"Invalid Request: {detail}"[:300], request_id)


async def check_message_off_loop(raw: str | bytes) -> types.JSONRPCMessage | types.JSONRPCError | None:
    """`check_message`, in a worker thread for a long message so the event loop keeps serving."""
    if len(raw) < THREAD_CHARS:
        return check_message(raw)
    return await anyio.to_thread.run_sync(check_message, raw)


class _NoLines:
    """Input for the SDK's own stdin reader, which `checked_stdio_server` replaces: none."""

    def __aiter__(self) -> _NoLines:
        return self

    async def __anext__(self) -> str:
        raise StopAsyncIteration


class _UnownedTextWrapper(TextIOWrapper):
    """A text layer whose close (at garbage collection too) leaves the buffer open: it is not ours to close."""

    def close(self) -> None:
        with suppress(ValueError):
            self.detach()


def _divert_stdin() -> int | None:
    """Move the wire's stdin to a private descriptor and point fd 0 at /dev/null, as the SDK's `stdio_server`
    does: a handler or child process that reads stdin gets EOF, not the client's messages. None if it cannot."""
    if sys.platform == "win32" or sys.stdin is None:
        return None
    try:
        if sys.stdin.buffer.fileno() != 0:
            return None
        import fcntl

        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except (OSError, ValueError, AttributeError):
        return None
    try:
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:
        os.close(private)
        return None
    try:
        os.dup2(null, 0)
    except OSError:
        os.close(private)
        return None
    finally:
        os.close(null)
    return private


@contextmanager
def _claimed_stdin() -> Iterator[BinaryIO]:
    """The wire's stdin as a binary file while fd 0 reads /dev/null; fd 0 restored on the way out."""
    private = _divert_stdin()
    if private is None:
        yield sys.stdin.buffer
        return
    try:
        # closefd=False: a worker thread may still block reading it after the transport ends; never recycle it
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        with suppress(OSError):
            os.dup2(private, 0)


async def _read_checked(
    lines: AsyncIterable[str],
    accepted: MemoryObjectSendStream[SessionMessage | Exception],
    answers: MemoryObjectSendStream[SessionMessage],
) -> None:
    """Each line checked: a message goes on to the server, a malformed one is answered here."""
    async with accepted:
        async for line in lines:
            if not line.strip():
                continue  # not a message: nothing to answer
            if not line.isascii() and _SURROGATE.search(line):  # bytes that are not UTF-8 (surrogateescape)
                checked: types.JSONRPCMessage | types.JSONRPCError | None = refusal(PARSE_ERROR, NOT_UTF8)
            else:
                checked = await check_message_off_loop(line)
            if checked is None:
                continue  # a notification: never answered
            try:
                if isinstance(checked, types.JSONRPCError):
                    await answers.send(SessionMessage(checked))
                else:
                    await accepted.send(SessionMessage(checked))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the server has stopped: nobody left to answer or to read


@asynccontextmanager
async def checked_stdio_server() -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The SDK's `stdio_server` (stdout on a private descriptor, fd 1 to stderr while serving) with its stdin
    reader replaced: the read stream carries only messages `check_message` accepted, the others are answered on
    the write stream."""
    from mcp.server.stdio import stdio_server

    with _claimed_stdin() as stdin_binary:
        # surrogateescape: a byte that is not UTF-8 stays recognisable (a -32700), instead of becoming U+FFFD
        lines = anyio.wrap_file(_UnownedTextWrapper(stdin_binary, encoding="utf-8", errors="surrogateescape"))
        async with stdio_server(stdin=_NoLines()) as (_, write_stream):  # type: ignore[arg-type]
            accepted, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_read_checked, lines, accepted, write_stream)
                try:
                    yield read_stream, write_stream
                finally:
                    tg.cancel_scope.cancel()
