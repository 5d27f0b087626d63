"""`POST /sessions/{id}/fork` over Streamable HTTP: auth, unknown sessions, the session cap, and forks that a
client drives through `_meta["aw/session"]` on their own."""

from __future__ import annotations

import httpx
import pytest
from mcp import Client

from aw_mcp.protocol.http_guard import HttpOptions
from tests.conftest import free_port
from tests.hardening.test_http_protocol_backend import http_world

pytestmark = pytest.mark.anyio
TOKEN = {"authorization": "Bearer s3cret"}


def base(url: str) -> str:
    return url.removesuffix("/mcp")


async def test_fork_needs_the_token_404s_an_unknown_session_and_counts_against_the_cap() -> None:
    async with http_world(HttpOptions(port=free_port(), auth_token="s3cret")) as (url, simulator):
        simulator.registry.max_sessions = 4
        parent = simulator.registry.get("alice")
        async with httpx.AsyncClient() as http:
            assert (await http.post(f"{base(url)}/sessions/alice/fork", json={"n": 2})).status_code == 401
            missing = await http.post(f"{base(url)}/sessions/nobody/fork", json={"n": 2}, headers=TOKEN)
            assert missing.status_code == 404 and "nobody" in missing.json()["error"]
            bad = await http.post(f"{base(url)}/sessions/alice/fork", json={"n": "2"}, headers=TOKEN)
            assert bad.status_code == 400 and "n" in bad.json()["error"]
            made = await http.post(f"{base(url)}/sessions/alice/fork", json={"n": 2}, headers=TOKEN)
            assert made.status_code == 200, made.text
            ids = made.json()["sessions"]
            assert len(ids) == 2 and made.json()["forked_from"] == {"session": "alice", "call": 0}
            # alice + 2 forks, 3 more would pass the cap of 4. Idle sessions make room, least recently used first (as
            # for any new session); with the forks in the middle of a call, nothing can.
            for key in ids:
                simulator.registry.get(key).busy += 1
            live = len(simulator.registry)
            full = await http.post(f"{base(url)}/sessions/alice/fork", json={"n": 3}, headers=TOKEN)
            assert full.status_code == 409 and "no room" in full.json()["error"]
            assert len(simulator.registry) == live  # all or none
        assert parent.id == "alice" and all(
            simulator.registry.get(i).forked_from.session == "alice" for i in ids
        )


async def test_forks_are_driven_by_their_own_keys_and_diverge() -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        async with Client(url) as client:  # the 2026-07-28 revision: stateless, routed by `aw/session`
            first = await client.call_tool(
                "cancel_order", {"order_id": "ORD-1"}, meta={"aw/session": "run-1"}
            )
            assert not first.is_error
            async with httpx.AsyncClient() as http:
                made = await http.post(f"{base(url)}/sessions/run-1/fork", json={"n": 2})
            a, b = made.json()["sessions"]
            await client.call_tool("cancel_order", {"order_id": "ORD-2"}, meta={"aw/session": a})
        registry = simulator.registry
        assert [r.arguments["order_id"] for r in registry.get(a).records] == ["ORD-1", "ORD-2"]
        assert [r.arguments["order_id"] for r in registry.get(b).records] == ["ORD-1"]
        assert [r.arguments["order_id"] for r in registry.get("run-1").records] == ["ORD-1"]
        new = registry.get(a).records[-1]
        assert new.session == a and new.forked_from.session == "run-1" and new.forked_from.call == 1
