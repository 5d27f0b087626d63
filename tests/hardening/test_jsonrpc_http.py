"""Item 6 of issue 21 over HTTP: a request with an id JSON-RPC does not allow is answered -32600 with `id: null`
(not a bare 202), malformed shapes -32600 (not -32602), with the id when it can be read; on both protocol eras."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from aw_mcp.protocol.http_guard import HttpOptions
from tests.conftest import free_port
from tests.hardening.test_http_protocol_backend import ACCEPT, INIT, http_world, sse_json

pytestmark = pytest.mark.anyio
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def legacy_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """A 2025-11-25 session, initialized: the headers its requests carry."""
    init = await http.post(url, json=INIT, headers=ACCEPT)
    headers = {
        **ACCEPT,
        "mcp-session-id": init.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


def modern_headers(method: str) -> dict[str, str]:
    return {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": method}


def shapes() -> dict[str, Any]:
    """Bodies (raw text) by name; each a request whose id (5) can be read."""
    ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
    call = (
        '{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "cancel_order", "arguments": '
    )
    return {
        "jsonrpc 1.0": json.dumps({**ping, "jsonrpc": "1.0"}),
        "integer method": json.dumps({**ping, "method": 7}),
        "string params": json.dumps({**ping, "params": "x"}),
        "array params": json.dumps({**ping, "params": [1]}),
        "lone surrogate": call + '{"order_id": "\\ud800"}}}',
        "5,000 digits": call + '{"order_id": "ORD-1", "n": ' + "7" * 5000 + "}}}",
        "900 deep": call + '{"order_id": "ORD-1", "deep": ' + "[" * 900 + "]" * 900 + "}}}",
    }


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_ids_json_rpc_does_not_allow_are_answered_not_accepted(era: str) -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, _):
        async with httpx.AsyncClient(timeout=30) as http:
            headers = await legacy_session(http, url) if era != MODERN else modern_headers("ping")
            answers = []
            for bad in (None, 1.5, True, {}, [1]):
                body = {"jsonrpc": "2.0", "id": bad, "method": "ping"}
                if era == MODERN:
                    body["params"] = {"_meta": ENVELOPE}
                answers.append(await http.post(url, content=json.dumps(body), headers=headers))
            good = await http.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=headers)
    assert [a.status_code for a in answers] == [400] * 5  # not 202: a request is owed an answer
    assert all(a.json() == {"jsonrpc": "2.0", "id": None, "error": a.json()["error"]} for a in answers)
    assert all(a.json()["error"]["code"] == -32600 for a in answers)
    if era != MODERN:
        assert sse_json(good)["id"] == 9  # a well-formed request still reaches the SDK


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
async def test_malformed_shapes_are_invalid_requests_with_the_id_echoed(era: str) -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, _):
        async with httpx.AsyncClient(timeout=30) as http:
            headers = await legacy_session(http, url) if era != MODERN else modern_headers("ping")
            answers = {
                name: await http.post(url, content=body, headers=headers) for name, body in shapes().items()
            }
            no_method = await http.post(url, json={"jsonrpc": "2.0", "id": 5}, headers=headers)
            not_json = await http.post(url, content=b"{nope", headers=headers)
    codes = {name: (r.status_code, r.json()["id"], r.json()["error"]["code"]) for name, r in answers.items()}
    envelope = ["jsonrpc 1.0", "integer method", "string params", "array params"]
    assert {name: codes[name] for name in envelope} == {name: (400, 5, -32600) for name in envelope}
    inside = ["lone surrogate", "5,000 digits", "900 deep"]
    assert {name: codes[name] for name in inside} == {name: (400, 5, -32602) for name in inside}
    assert (no_method.status_code, no_method.json()["id"], no_method.json()["error"]["code"]) == (
        400,
        5,
        -32600,
    )
    assert (not_json.status_code, not_json.json()["id"], not_json.json()["error"]["code"]) == (
        400,
        None,
        -32700,
    )


async def test_the_checks_keep_their_order_auth_host_and_size_first() -> None:
    options = HttpOptions(port=free_port(), auth_token="t")
    bad = json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"})
    auth = {**ACCEPT, "authorization": "Bearer t"}
    async with http_world(options) as (url, _):
        async with httpx.AsyncClient(timeout=30) as http:
            unauthenticated = await http.post(url, content=bad, headers=ACCEPT)
            rebinding = await http.post(url, content=bad, headers={**auth, "host": "evil.example"})
            too_big = await http.post(url, content=b"[" * (5 * 1024 * 1024), headers=auth)
            other_path = await http.post(url.replace("/mcp", "/other"), content=bad, headers=auth)
            answered = await http.post(url, content=bad, headers=auth)
    assert unauthenticated.status_code == 401
    assert rebinding.status_code in (400, 421)
    assert too_big.status_code == 413
    assert other_path.status_code == 404
    assert answered.status_code == 400 and answered.json()["error"]["code"] == -32600
