"""Item 7 of issue 21: the capabilities the server advertises, it keeps.

- `tools.listChanged` over 2025-era HTTP: a catalog change reaches every session's GET stream, not only the
  caller's.
- `resources.subscribe` on 2026-07-28: a `subscriptions/listen` stream for `world://trajectory` hears
  `notifications/resources/updated` as the trajectory grows.
- `Authorization: bearer TOKEN`: the scheme name is case-insensitive.
- A stateless request cannot reach a 2025-era transport session's world, by `_meta` or by header.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import TaskStatus
from mcp import Client
from mcp.server.subscriptions import ResourceUpdated, ToolsListChanged

from aw_mcp.load.world import load_world_text
from aw_mcp.protocol.http_guard import HttpOptions
from aw_mcp.protocol.server import (
    FAULTS_URI,
    SCORECARD_URI,
    TRAJECTORY_URI,
    SessionEvents,
    WorldApp,
    build_server,
)
from aw_mcp.sim.simulator import Simulator
from tests.conftest import SMALL_WORLD, ScriptedWorldModel, free_port, observation
from tests.hardening.test_http_protocol_backend import ACCEPT, INIT, http_world, sse_json

pytestmark = pytest.mark.anyio
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
# The first call changes the catalog, for the whole world: get_order goes.
CATALOG_WORLD = (
    SMALL_WORLD + "perturbations:\n  - name: drop\n    fault: {kind: catalog, remove: [get_order]}\n"
)
WAIT_S = 10  # for something that takes milliseconds: a bound for "never", not a speed check


async def legacy_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    init = await http.post(url, json=INIT, headers=ACCEPT)
    assert init.status_code == 200, init.text
    headers = {
        **ACCEPT,
        "mcp-session-id": init.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


async def legacy_request(http: httpx.AsyncClient, url: str, headers: dict[str, str], n: int, method: str,
                         params: dict[str, Any] | None = None) -> dict:  # fmt: skip
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": n, "method": method}
    if params is not None:
        body["params"] = params
    return sse_json(await http.post(url, json=body, headers=headers))


async def modern_request(http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any],
                         **headers: str) -> dict:  # fmt: skip
    name = params.get("uri") or params.get("name")
    extra = {"mcp-name": name} if name else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = await http.post(
        url,
        json=body,
        headers={**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": method, **extra, **headers},
    )
    return sse_json(answer)


async def test_a_catalog_change_reaches_every_2025_http_session() -> None:
    async with http_world(HttpOptions(port=free_port()), CATALOG_WORLD) as (url, _):
        async with httpx.AsyncClient(timeout=30) as http:
            caller = await legacy_session(http, url)
            other = await legacy_session(http, url)
            listed = await legacy_request(http, url, other, 2, "tools/list")
            assert [t["name"] for t in listed["result"]["tools"]] == ["get_order", "cancel_order"]
            told = anyio.Event()
            frames: list[dict] = []

            async def read_get_stream(*, task_status: TaskStatus[None]) -> None:
                get_headers = {**other, "accept": "text/event-stream"}
                async with http.stream("GET", url, headers=get_headers) as stream:
                    assert stream.status_code == 200
                    task_status.started()
                    async for line in stream.aiter_lines():
                        if line.startswith("data:"):
                            frames.append(json.loads(line[5:]))
                            if frames[-1].get("method") == "notifications/tools/list_changed":
                                told.set()
                                return

            async with anyio.create_task_group() as tg:
                await tg.start(read_get_stream)
                await legacy_request(
                    http, url, other, 3, "ping"
                )  # a round trip on the session: its stream is up
                called = await legacy_request(
                    http,
                    url,
                    caller,
                    2,
                    "tools/call",
                    {"name": "cancel_order", "arguments": {"order_id": "ORD-1"}},
                )
                assert called["result"]["content"][0]["text"] == "Order cancelled."
                with anyio.fail_after(WAIT_S):
                    await told.wait()
            relisted = await legacy_request(http, url, other, 4, "tools/list")
    assert [t["name"] for t in relisted["result"]["tools"]] == ["cancel_order"]  # what it was told is true


@pytest.mark.parametrize("transport", ["in-process", "http"])
async def test_a_listen_stream_hears_the_trajectory_grow(transport: str) -> None:
    world = load_world_text(SMALL_WORLD)
    simulator = Simulator(world, ScriptedWorldModel(lambda *_: observation("Order cancelled.")))
    if transport == "in-process":
        async with Client(build_server(WorldApp(simulator, SMALL_WORLD))) as client:
            events, capabilities = await listen_while_calling(client)
    else:
        async with http_world(HttpOptions(port=free_port())) as (url, _):
            async with Client(url) as client:
                events, capabilities = await listen_while_calling(client)
    assert capabilities.resources is not None and capabilities.resources.subscribe is True  # advertised ...
    assert events == [ResourceUpdated(TRAJECTORY_URI)] * 2  # ... and kept: one update per call


async def listen_while_calling(client: Client) -> tuple[list[Any], Any]:
    assert client.protocol_version == MODERN
    events: list[Any] = []
    async with client.listen(resource_subscriptions=[TRAJECTORY_URI]) as subscription:
        for n in range(2):
            await client.call_tool("cancel_order", {"order_id": f"ORD-{n}"})
            with anyio.fail_after(WAIT_S):
                async for event in subscription:
                    events.append(event)
                    break
    return events, client.server_capabilities


async def test_listen_streams_hear_their_own_session() -> None:
    events = SessionEvents()
    heard: dict[str, list[Any]] = {"alice": [], "bob": [], "anyone": []}
    events.subscribe("alice", heard["alice"].append)
    events.subscribe("bob", heard["bob"].append)
    unsubscribe = events.subscribe(None, heard["anyone"].append)
    await events.publish(ResourceUpdated(TRAJECTORY_URI), "alice")
    await events.publish(ResourceUpdated(FAULTS_URI), "http-0123")  # a transport session: no stateless reader
    await events.publish(ToolsListChanged())  # the whole world's
    unsubscribe()
    await events.publish(ResourceUpdated(SCORECARD_URI), "bob")
    assert heard["alice"] == [ResourceUpdated(TRAJECTORY_URI), ToolsListChanged()]
    assert heard["bob"] == [ToolsListChanged(), ResourceUpdated(SCORECARD_URI)]
    assert heard["anyone"] == [ResourceUpdated(TRAJECTORY_URI), ToolsListChanged()]
    assert len(events) == 2


async def test_the_bearer_scheme_name_is_case_insensitive() -> None:
    async with http_world(HttpOptions(port=free_port(), auth_token="s3cret")) as (url, _):
        async with httpx.AsyncClient(timeout=30) as http:

            async def status(authorization: str) -> int:
                headers = {**ACCEPT, "authorization": authorization}
                return (await http.post(url, json=INIT, headers=headers)).status_code

            accepted = [await status(v) for v in ("bearer s3cret", "BEARER s3cret", "Bearer  s3cret")]
            refused = [await status(v) for v in ("Basic s3cret", "Bearer", "bearer S3CRET", "Bearers3cret")]
    assert accepted == [200, 200, 200]
    assert refused == [401, 401, 401, 401]


async def test_stateless_requests_cannot_reach_a_transport_session() -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        async with httpx.AsyncClient(timeout=30) as http:
            stateful = await legacy_session(http, url)
            sid = stateful["mcp-session-id"]
            called = await legacy_request(
                http,
                url,
                stateful,
                2,
                "tools/call",
                {"name": "cancel_order", "arguments": {"order_id": "ORD-7"}},
            )
            assert called["result"]["content"][0]["text"] == "Order cancelled."
            read = {"uri": TRAJECTORY_URI}
            by_meta = await modern_request(
                http, url, "resources/read", {**read, "_meta": {**ENVELOPE, "aw/session": f"http-{sid}"}}
            )
            by_header = await modern_request(
                http, url, "resources/read", {**read, "_meta": ENVELOPE}, **{"mcp-session-id": sid}
            )
            own = await legacy_request(http, url, stateful, 3, "resources/read", read)
    assert "ORD-7" in own["result"]["contents"][0]["text"]  # the session's own read sees its call
    assert "error" in by_meta, by_meta  # refused: `aw/session` keys never begin with "http-"
    assert by_meta["error"]["code"] == -32602 and "http-" in by_meta["error"]["message"]
    assert "ORD-7" not in json.dumps(by_header)  # the header is no key on the stateless revision
    assert by_header["result"]["contents"][0]["text"] == ""  # the shared session, which made no call
    assert len(simulator.registry.get(f"http-{sid}").records) == 1
