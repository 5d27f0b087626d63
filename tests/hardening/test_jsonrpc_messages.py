"""Item 6 of issue 21, in-process: `check_message`, the check every stdio line and HTTP POST body passes before
the SDK sees it. Each malformed request gets its JSON-RPC error, with its id whenever it can be read."""

from __future__ import annotations

import json

import anyio
import mcp.types as types
import pytest

from aw_mcp.protocol.jsonrpc_checks import MAX_DEPTH, check_message, check_message_off_loop, nesting_depth

pytestmark = pytest.mark.anyio
PING = '{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": '


def answer(raw: str | bytes) -> tuple[object, int]:
    checked = check_message(raw)
    assert isinstance(checked, types.JSONRPCError), checked
    return checked.id, checked.error.code


@pytest.mark.parametrize("bad_id", ["null", "1.5", "true", "{}", "[1]", "1" * 5000, '"\\udc00"'])
def test_ids_json_rpc_does_not_allow_get_an_invalid_request_with_a_null_id(bad_id: str) -> None:
    assert answer(f'{{"jsonrpc": "2.0", "id": {bad_id}, "method": "ping"}}') == (None, -32600)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ('{"jsonrpc": "1.0", "id": 3, "method": "ping"}', -32600),
        ('{"id": 3, "method": "ping"}', -32600),
        ('{"jsonrpc": "2.0", "id": 3, "method": 5}', -32600),
        ('{"jsonrpc": "2.0", "id": 3}', -32600),
        (PING + '"x"}', -32600),
        (PING + "5}", -32600),
        (PING + "[1]}", -32600),
        (PING + '{"s": "\\ud800"}}', -32602),
        (PING + '{"\\udfff": 1}}', -32602),
        (PING + '{"n": ' + "9" * 5000 + "}}", -32602),
        (PING + '{"x": ' + "1" * 4400 + ".5}}", -32602),
        (PING + '{"deep": ' + "[" * 900 + "]" * 900 + "}}", -32602),
        (PING + '{"deep": ' + "{" * 100_000 + "}" * 100_000 + "}}", -32602),
        ('{"jsonrpc": "2.0", "id": 3, "method": "\\ud800"}', -32600),
    ],
)
def test_a_readable_id_is_echoed(raw: str, code: int) -> None:
    assert answer(raw) == (3, code)


def test_a_batch_a_scalar_and_text_that_is_not_json() -> None:
    batch = check_message('[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]')
    assert isinstance(batch, types.JSONRPCError) and "batch" in batch.error.message
    assert answer('"ping"') == (None, -32600)
    assert answer("{nope") == (None, -32700)
    assert answer(b'{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"a": "\xff"}}') == (None, -32700)
    assert answer("[" * 5000 + "]" * 5000) == (None, -32600)


def test_well_formed_messages_pass_unchanged() -> None:
    request = check_message(PING + '{"s": "\\ud83d\\ude00 [[[ {{{", "n": ' + "9" * 4300 + "}}")
    assert isinstance(request, types.JSONRPCRequest) and request.id == 3
    assert request.params is not None and request.params["s"] == "\U0001f600 [[[ {{{"  # a pair is a character
    notification = check_message('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    assert isinstance(notification, types.JSONRPCNotification)
    response = check_message('{"jsonrpc": "2.0", "id": "s-1", "result": {}}')
    assert isinstance(response, types.JSONRPCResponse)
    deep = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    assert isinstance(check_message(PING + '{"a": ' + deep + "}}"), types.JSONRPCRequest)


def test_notifications_and_responses_never_get_an_id_back() -> None:
    assert answer('{"jsonrpc": "2.0", "method": 5}') == (None, -32600)  # a malformed notification
    assert answer('{"jsonrpc": "2.0", "id": 3, "result": 5}') == (None, -32600)  # the id is the server's own
    assert answer('{"jsonrpc": "2.0", "id": 3, "error": {"code": "x"}}') == (None, -32600)


def test_brackets_in_strings_do_not_count_as_nesting() -> None:
    assert nesting_depth('{"a": "[[[[\\"{{{{", "b": [[1]]}') == 3
    assert nesting_depth('"[[[[') == 0  # an unterminated string runs to the end


async def test_a_long_message_is_checked_off_the_event_loop() -> None:
    raw = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"s": "x" * 1_000_000}})
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        checked = await check_message_off_loop(raw)
        tg.cancel_scope.cancel()
    assert isinstance(checked, types.JSONRPCRequest)
    assert ticks > 0  # the loop ran other tasks while the message was being checked
