"""Issue 34, item 6: sessions are owned. A client's world is never evicted to make room for another client's forks
(forks make room only among their own family, else 409); an evicted world tells its owner on its next request,
never an empty history; the fork route reads a bounded body; `Env.fork(n)` and `{"n": N}` have a maximum (256) and
copy off the loop.

Before the fix: B's 5 forks of 256 evicted A's idle 2-call world and A's next call ran on an empty history, a 1 GiB
fork body was read whole, and `Env.fork(10**5)` held the loop 47 s."""

from __future__ import annotations

import time

import httpx
import pytest
from mcp import Client, MCPError

from aw_mcp import Env
from aw_mcp.load.world import load_world_text
from aw_mcp.protocol.http_guard import HttpOptions
from aw_mcp.protocol.server import TRAJECTORY_URI
from aw_mcp.sim.registry import MAX_FORKS_PER_REQUEST, SessionEvictedError, SessionRegistry
from aw_mcp.sim.session import SessionKeyError
from aw_mcp.sim.simulator import Simulator
from tests.conftest import SMALL_WORLD, ScriptedWorldModel, free_port, observation
from tests.hardening.loop_lag import PING_BOUND_S, lag_during
from tests.hardening.test_http_protocol_backend import http_world

pytestmark = pytest.mark.anyio
CANCEL = ("cancel_order", {"order_id": "ORD-1"})


def base(url: str) -> str:
    return url.removesuffix("/mcp")


async def test_b_forks_never_evict_a_s_idle_world_over_http() -> None:
    """The issue's scenario: A's idle 2-call world, then B forks 5 x 256 under --max-sessions 1000."""
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        simulator.registry.max_sessions = 1000
        async with Client(url) as client:
            for _ in range(2):
                await client.call_tool(*CANCEL, meta={"aw/session": "a"})
            await client.call_tool(*CANCEL, meta={"aw/session": "b"})
            statuses = []
            async with httpx.AsyncClient(timeout=60) as http:
                for _ in range(5):
                    made = await http.post(f"{base(url)}/sessions/b/fork", json={"n": 256})
                    statuses.append(made.status_code)
                    assert made.status_code in (200, 409), made.text
            assert statuses[:3] == [200, 200, 200]  # room enough; then B's own idle forks make room
            third = await client.call_tool(*CANCEL, meta={"aw/session": "a"})
        assert not third.is_error
        a = simulator.registry.get("a")
        assert [r.index for r in a.records] == [0, 1, 2]  # A's history intact: its third call saw two turns
        assert len(simulator.registry) <= 1000
        family = {
            k for k in (s.id for s in simulator.registry.sessions()) if simulator.registry.owner(k) == "b"
        }
        assert len(family) > 256 and "a" not in family


def test_a_fork_is_refused_when_the_registry_is_full_of_other_clients_worlds() -> None:
    registry = SessionRegistry(load_world_text(SMALL_WORLD), max_sessions=6)
    for key in ("a", "c", "d", "e", "b"):
        registry.get(key)
    children = registry.fork("b", 1)  # the last free place
    assert registry.owner(children[0].id) == "b"
    with pytest.raises(SessionKeyError, match="a fork never evicts another client's world"):
        registry.fork("b", 2)
    assert {s.id for s in registry.sessions()} == {"a", "c", "d", "e", "b", children[0].id}  # all or none
    (again,) = registry.fork("b", 1)  # its own idle fork makes room for the next one
    assert {s.id for s in registry.sessions()} == {"a", "c", "d", "e", "b", again.id}
    with pytest.raises(SessionKeyError, match="1 to 256"):
        registry.fork("b", MAX_FORKS_PER_REQUEST + 1)


async def test_an_evicted_world_tells_its_owner_on_its_next_call() -> None:
    clock = [0.0]
    world = load_world_text(SMALL_WORLD)
    registry = SessionRegistry(world, max_sessions=2, idle_ttl_s=60, clock=lambda: clock[0])
    simulator = Simulator(world, ScriptedWorldModel(lambda *_: observation("Order cancelled.")), registry)
    await simulator.call(*CANCEL, session_key="a")
    clock[0] += 1
    await simulator.call(*CANCEL, session_key="b")
    clock[0] += 1
    await simulator.call(*CANCEL, session_key="c")  # room for c: a, the least recently used idle one, goes
    with pytest.raises(
        SessionEvictedError, match="world session 'a' is gone: it was the least recently used"
    ):
        await simulator.call(*CANCEL, session_key="a")
    fresh = await simulator.call(*CANCEL, session_key="a")  # told once; now a new world under that key
    assert fresh.record is not None and fresh.record.index == 0
    clock[0] += 61
    with pytest.raises(SessionEvictedError, match=r"it was idle for more than 60 s \(--session-ttl\)"):
        await simulator.call(*CANCEL, session_key="c")
    registry.drop("a")  # a session its owner ended is not "evicted"
    assert (await simulator.call(*CANCEL, session_key="a")).record.index == 0  # type: ignore[union-attr]


async def test_over_mcp_the_evicted_client_gets_an_error_naming_the_cause() -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        simulator.registry.max_sessions = 2
        async with Client(url) as client:
            await client.call_tool(*CANCEL, meta={"aw/session": "a"})
            await client.call_tool(*CANCEL, meta={"aw/session": "b"})
            await client.call_tool(*CANCEL, meta={"aw/session": "c"})
            with pytest.raises(MCPError, match="world session 'a' is gone"):
                await client.call_tool(*CANCEL, meta={"aw/session": "a"})


async def test_a_listing_or_a_read_leaves_the_eviction_notice_for_the_call() -> None:
    """An agent that reconnects often lists the tools (or reads its trajectory) first: that must not use the
    notice up, or its next call would run silently on an empty world. The listing answers; the read says why."""
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        simulator.registry.max_sessions = 2
        async with Client(url) as client:
            for key in ("a", "b", "c"):
                await client.call_tool(*CANCEL, meta={"aw/session": key})
            listed = await client.list_tools(meta={"aw/session": "a"})
            with pytest.raises(MCPError, match="world session 'a' is gone"):
                await client.read_resource(TRAJECTORY_URI, meta={"aw/session": "a"})
            with pytest.raises(MCPError, match="world session 'a' is gone"):
                await client.call_tool(*CANCEL, meta={"aw/session": "a"})
            fresh = await client.call_tool(*CANCEL, meta={"aw/session": "a"})  # told once: a new world now
    assert [t.name for t in listed.tools] == ["get_order", "cancel_order"] and not fresh.is_error
    assert simulator.registry.get("a").listings == [] and len(simulator.registry.get("a").records) == 1


async def test_the_fork_route_reads_a_bounded_body() -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        simulator.registry.get("a")
        async with httpx.AsyncClient(timeout=60) as http:

            async def endless():  # noqa: ANN202 -- 1 GiB, if anyone read it all
                chunk = b" " * 65536
                for _ in range(16384):
                    yield chunk

            started = time.monotonic()
            json_body = {"content-type": "application/json"}
            big = await http.post(f"{base(url)}/sessions/a/fork", content=endless(), headers=json_body)
            took = time.monotonic() - started
            declared = await http.post(
                f"{base(url)}/sessions/a/fork",
                content=b'{"n": 1}' + b" " * 2000,
                headers=json_body,
            )
        assert big.status_code == 413 and "1,024 bytes" in big.json()["error"]
        assert took < 30  # refused after the first KiB, not after a GiB
        assert declared.status_code == 413


async def test_the_route_forks_256_while_other_sessions_keep_being_answered() -> None:
    async with http_world(HttpOptions(port=free_port())) as (url, simulator):
        async with Client(url) as client:
            for _ in range(20):
                await client.call_tool(*CANCEL, meta={"aw/session": "a"})
        async with httpx.AsyncClient(timeout=60) as http:
            made, lag = await lag_during(lambda: http.post(f"{base(url)}/sessions/a/fork", json={"n": 256}))
            too_many = await http.post(f"{base(url)}/sessions/a/fork", json={"n": 257})
        assert made.status_code == 200 and len(made.json()["sessions"]) == 256
        assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"
        assert too_many.status_code == 400 and "256" in too_many.json()["error"]
        child = simulator.registry.get(made.json()["sessions"][-1])
        assert len(child.records) == 20 and child.forked_from.session == "a"  # type: ignore[union-attr]


async def test_env_fork_has_a_maximum_and_copies_off_the_loop() -> None:
    async with await Env.open("mcp_crm", backend="demo", seed=3) as env:
        for _ in range(10):
            await env.call("search_contacts", {"query": "murphy"})
        started = time.monotonic()
        with pytest.raises(ValueError, match="1 to 256 copies at a time, not 100,000"):
            await env.fork(10**5)
        assert time.monotonic() - started < 5  # refused at once (before: 47 s and 451 MB, on the loop)
        children, lag = await lag_during(lambda: env.fork(MAX_FORKS_PER_REQUEST))
        assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"
        assert len(children) == 256 and len({c.id for c in children}) == 256
        assert all(c.session.forked_from.session == env.id for c in children)  # type: ignore[union-attr]
        assert all(len(c.trajectory) == 10 for c in children)
        await children[0].call("search_contacts", {"query": "x"})
        assert len(children[0].trajectory) == 11 and len(children[1].trajectory) == 10 == len(env.trajectory)
        for child in children:
            await child.close()
