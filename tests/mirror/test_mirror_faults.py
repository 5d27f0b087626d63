"""Faults on a real server's answers: a world file's and a preset's perturbations apply to what server-memory
really answered, before the agent sees it, and the scorecard grades the agent's reactions as on a simulated world."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from aw_mcp.eval.scorecard import score_files
from aw_mcp.trajectory.records import read_trajectory
from tests.mirror.test_mirror_real_servers import mirror
from tests.mirror.upstreams import upstream

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

FAULTS = """\
seed: 7
perturbations:
  - name: graph-down
    match: {tool: read_graph}
    fault: {kind: error, status: 503}
    schedule: {mode: first, calls: 1}
  - name: poisoned-search
    match: {tool: search_nodes}
    fault: {kind: inject, slot: ignore_previous}
    schedule: {mode: first, calls: 1}
  - name: stale-open
    match: {tool: open_nodes}
    fault: {kind: stale, ground_truth: true}   # the real server is still asked: its answer is kept
    schedule: {mode: window, start: 2}
"""


async def test_faults_from_a_world_file_and_a_preset_apply_to_real_answers_and_are_graded(
    tmp_path: Path,
) -> None:
    memory = [upstream("mcp-server-memory")]
    faults = tmp_path / "faults.yaml"
    faults.write_text(FAULTS)
    record, card = tmp_path / "run.jsonl", tmp_path / "card.json"
    params = mirror(
        memory,
        "--world", str(faults), "--preset", "slow_network", "--record", str(record), "--scorecard", str(card),
        env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")},
    )  # fmt: skip
    async with Client(params, mode="legacy") as client:
        await client.call_tool(
            "create_entities",
            {"entities": [{"name": "Ada", "entityType": "person", "observations": ["one"]}]},
        )
        down = await client.call_tool("read_graph", {})
        retried = await client.call_tool("read_graph", {})  # the agent retries: the real graph this time
        searched = await client.call_tool("search_nodes", {"query": "Ada"})
        first_open = await client.call_tool("open_nodes", {"names": ["Ada"]})
        await client.call_tool(
            "add_observations", {"observations": [{"entityName": "Ada", "contents": ["two"]}]}
        )
        stale = await client.call_tool("open_nodes", {"names": ["Ada"]})
    assert down.is_error and "503" in down.content[0].text
    assert not retried.is_error and json.loads(retried.content[0].text)["entities"][0]["name"] == "Ada"
    # the stale answer is the first one, although the real server now holds observation "two"
    assert stale.content[0].text == first_open.content[0].text and "two" not in stale.content[0].text
    calls = list(read_trajectory(record))
    fired = {fault.name: call for call in calls for fault in call.applied_faults()}
    assert {"graph-down", "poisoned-search", "stale-open"} <= set(fired)
    assert (
        fired["stale-open"].truth is not None and "two" in fired["stale-open"].truth
    )  # the real answer kept
    injected = next(f for f in fired["poisoned-search"].faults if f.name == "poisoned-search")
    assert injected.ground_truth == retried.content[0].text  # the real answer, before the injection
    assert "<IMPORTANT>" in searched.content[0].text and "<IMPORTANT>" not in injected.ground_truth
    assert any(f.name.startswith("slow_network/") for c in calls for f in c.faults)  # the preset fired too
    assert all(c.answered_by == "upstream" for c in calls)
    graded = {(r.fault, r.outcome) for r in score_files([record]).reactions}
    written = {(r["fault"], r["outcome"]) for r in json.loads(card.read_text())["reactions"]}
    assert graded == written and {"graph-down", "poisoned-search", "stale-open"} <= {f for f, _ in graded}
    assert ("graph-down", "recovered") in graded, graded
