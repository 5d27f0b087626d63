"""`aw_mcp.Env`: worlds driven in-process, forked into independent copies, deterministic for seeded evals."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import MCPError

from aw_mcp import Env
from aw_mcp.env import close_all
from aw_mcp.trajectory.records import read_lines

WRITE = ("update_deal_stage", {"deal_id": "deal_20871", "stage": "closed_won"})
READ = ("search_contacts", {"query": "murphy"})

pytestmark = pytest.mark.anyio


async def test_open_list_call_close_like_an_mcp_client() -> None:
    async with await Env.open("mcp_crm", backend="demo", seed=3) as env:
        assert "search_contacts" in [tool.name for tool in env.tools]
        result = await env.call(*READ)
        assert not result.is_error and result.structured_content["contacts"]
        assert result.content[-1].text.startswith("[demo backend")  # labelled, as over MCP
        assert [r.tool for r in env.trajectory] == ["search_contacts"]
        with pytest.raises(MCPError, match="Unknown tool"):
            await env.call("no_such_tool", {})
        invalid = await env.call("search_contacts", {"query": 5})
        assert invalid.is_error and "Invalid arguments" in invalid.content[0].text
    with pytest.raises(RuntimeError, match="closed"):
        await env.call(*READ)


async def test_a_write_in_one_fork_is_invisible_to_its_siblings_and_parent() -> None:
    async with await Env.open("mcp_crm", backend="demo", seed=3) as parent:
        for _ in range(2):
            await parent.call(*READ)
        a, b = await parent.fork(2)
        await a.call(*WRITE)
        assert [r.tool for r in a.trajectory] == ["search_contacts", "search_contacts", "update_deal_stage"]
        assert [r.tool for r in b.trajectory] == ["search_contacts", "search_contacts"]
        assert [r.tool for r in parent.trajectory] == ["search_contacts", "search_contacts"]
        assert [t.tool for t in b.session.history] == ["search_contacts", "search_contacts"]
        ledger_b = [e.text for e in b.session.ledger.entries(b.world.tool)]
        assert not any("update_deal_stage" in text for text in ledger_b)
        assert any("update_deal_stage" in e.text for e in a.session.ledger.entries(a.world.tool))
        new = a.trajectory[-1]
        assert new.index == 2 and new.session == a.id != b.id != parent.id
        assert new.forked_from is not None and (new.forked_from.session, new.forked_from.call) == (
            parent.id,
            2,
        )
        await b.call(*READ)  # the sibling goes on at the same index, on its own
        assert b.trajectory[-1].index == 2
        await close_all([a, b])


async def test_seeded_forks_given_the_same_actions_fire_the_same_faults_at_the_same_calls() -> None:
    async with await Env.open("faults_payments", backend="demo", seed=11) as parent:
        await parent.call("get_customer", {"customer_id": "cus_1a2b3c4d"})
        children = await parent.fork(4)
        charge = ("create_payment", {"invoice_id": "inv_300412", "amount": 18900})
        for child in children:
            for _ in range(6):
                await child.call(*charge)
        fired = [[(r.index, [f.name for f in r.faults]) for r in child.trajectory] for child in children]
        texts = [[r.observation for r in child.trajectory] for child in children]
        assert all(f == fired[0] for f in fired) and all(t == texts[0] for t in texts)
        names = {name for _, names in fired[0] for name in names}
        assert {"declined-first-charge", "rate-limited-charges"} <= names  # faults did fire, identically
        await close_all(children)


async def test_forks_share_one_backend_which_closes_with_the_last_env() -> None:
    from aw_mcp.env import _SHARED

    before = len(_SHARED.leases)
    parent = await Env.open("mcp_crm", backend="demo")
    children = await parent.fork(3)
    assert len(_SHARED.leases) == before + 1
    lease = _SHARED.leases[parent._lease]
    assert lease.users == 4
    await parent.close()
    await close_all(children[:2])
    assert lease.users == 1 and parent._lease in _SHARED.leases
    await children[2].close()
    assert parent._lease not in _SHARED.leases


async def test_recorded_forks_say_where_they_came_from_and_resume_at_a_call(tmp_path: Path) -> None:
    trajectory = tmp_path / "t.jsonl"
    async with await Env.open("mcp_crm", backend="demo", record=str(trajectory)) as env:
        for _ in range(3):
            await env.call(*READ)
        (child,) = await env.fork(1)
        await child.call(*WRITE)
        await child.close()
    lines = list(read_lines(trajectory))
    assert [line.forked_from is not None for line in lines] == [False, False, False, True]
    # The replay of a recorded incident, then a continuation: keep its first 2 calls, go on in a fork from there.
    async with await Env.open("mcp_crm", backend="demo", resume=str(trajectory), at=2) as resumed:
        assert [r.index for r in resumed.trajectory] == [0, 1]
        await resumed.call(*WRITE)
        assert resumed.trajectory[-1].index == 2
        assert resumed.trajectory[-1].forked_from.call == 2
    # Resuming the file continues its last session, that fork, with its parent's calls before the fork point.
    async with await Env.open("mcp_crm", backend="demo", resume=str(trajectory)) as again:
        assert [r.tool for r in again.trajectory] == [*["search_contacts"] * 2, "update_deal_stage"]
        assert [t.tool for t in again.session.history] == [*["search_contacts"] * 2, "update_deal_stage"]


async def test_the_fork_example_runs_eight_branches_from_call_five(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import runpy

    example = runpy.run_path(str(Path(__file__).parent.parent / "docs" / "examples" / "fork_eight_ways.py"))
    await example["main"]({"backend": "demo"})
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("branch ")] == [
        f"branch {n}" for n in range(1, 9)
    ]
    assert out.count("scorecard:") == 8 and "refused" in out  # the unknown tool, as over MCP
