"""Issue 33, item 7: the consistency guard checks each answer against what the session established (ids created
or deleted, counts, statuses and other fields seen, the world's state); a contradiction is recorded, reported and
scored; `model.on_contradiction: resample` keeps the first answer that contradicts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from aw_mcp import Env
from aw_mcp.eval.report import consistency_scores, summarize, text_summary
from aw_mcp.sim.consistency import Established
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import CallRecord, read_trajectory
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.anyio

WORLD = """\
name: records
description: A record store.
domain: mcp
seed: 3
state:
  records:
    - {id: R-1, status: active}
    - {id: R-2, status: active}
tools:
  - name: get_record
    description: Fetch one record.
    inputSchema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    annotations: {readOnlyHint: true}
  - name: list_records
    description: All records.
    inputSchema: {type: object, properties: {}}
    annotations: {readOnlyHint: true}
  - name: delete_record
    description: Delete one record.
    inputSchema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
model:
  thinking: false
  on_contradiction: {mode}
"""

CALLS = [
    ("get_record", {"record_id": "R-1"}),
    ("delete_record", {"record_id": "R-1"}),
    ("get_record", {"record_id": "R-1"}),
]


def observation(text: str) -> Reply:
    return Reply(content=f"**Environment Observation:**\n{text}")


ACTIVE = observation('{"id": "R-1", "status": "active"}')
DELETED = observation('{"deleted": true}')
NOT_FOUND = observation('{"error": "Record R-1 not found"}')


async def run(tmp_path: Path, mode: str, replies: list[Reply]) -> tuple[list, list[CallRecord], Path, int]:
    world = tmp_path / "records.yaml"
    world.write_text(WORLD.replace("{mode}", mode))
    trajectory = tmp_path / f"{mode}.jsonl"
    with ScriptedOpenAIServer(replies) as server:
        async with await Env.open(world, base_url=server.base_url, model="m", record=str(trajectory)) as env:
            results = [await env.call(tool, arguments) for tool, arguments in CALLS]
        asked = len(server.requests)
    return results, list(read_trajectory(trajectory)), trajectory, asked


async def test_a_deleted_record_returned_is_flagged_and_the_score_drops(tmp_path: Path) -> None:
    results, records, trajectory, asked = await run(tmp_path, "flag", [ACTIVE, DELETED, ACTIVE])
    assert asked == 3 and not results[2].is_error  # flag: the agent still gets the answer
    assert [r.consistency is None for r in records] == [True, True, False]
    verdict = records[2].consistency
    assert verdict is not None and (verdict.drawn, verdict.kept) == (1, 1)
    assert [(c.rule, c.earlier) for c in verdict.contradictions] == [("deleted", 1)]
    assert "R-1 was deleted (call 1)" in verdict.contradictions[0].message
    assert consistency_scores(records) == {records[0].session: (3, 1)}
    text = text_summary(summarize(trajectory))
    assert f"consistency, session {records[0].session}: 67% (1 of 3 answer(s)" in text
    assert "call 2 get_record [deleted]: R-1 was deleted (call 1), but this answer shows it" in text


async def test_resample_keeps_the_consistent_answer(tmp_path: Path) -> None:
    results, records, trajectory, asked = await run(
        tmp_path, "resample", [ACTIVE, DELETED, ACTIVE, NOT_FOUND]
    )
    assert asked == 4  # one more answer drawn for the contradicting call
    assert "not found" in results[2].content[0].text
    verdict = records[2].consistency
    assert verdict is not None and (verdict.drawn, verdict.kept, verdict.contradictions) == (2, 2, [])
    assert "not found" in (records[2].observation or "")
    assert consistency_scores(records) == {records[0].session: (3, 0)}
    assert "resampled, consistent answer 2 of 2 kept" in text_summary(summarize(trajectory))


async def test_resample_gives_up_after_max_resamples_and_keeps_the_first(tmp_path: Path) -> None:
    results, records, _, asked = await run(tmp_path, "resample", [ACTIVE, DELETED, ACTIVE, ACTIVE, ACTIVE])
    assert asked == 5  # the first answer and max_resamples (2) more, all contradicting
    verdict = records[2].consistency
    assert verdict is not None and (verdict.drawn, verdict.kept) == (3, 1) and verdict.contradictions


async def test_off_checks_nothing(tmp_path: Path) -> None:
    _, records, _, _ = await run(tmp_path, "off", [ACTIVE, DELETED, ACTIVE])
    assert all(r.consistency is None for r in records)


def world() -> WorldSpec:
    return WorldSpec.model_validate(
        {
            "name": "w",
            "state": {"records": [{"id": "R-1", "status": "active"}, {"id": "R-2", "status": "active"}]},
            "tools": [
                {"name": "get", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
                {"name": "list", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
                {"name": "update", "inputSchema": {"type": "object"}},
            ],
        }
    )


def known_after(*records: CallRecord) -> Established:
    known = Established.of_world(world())
    for record in records:
        known.add(record)
    return known


def test_the_rules_read_only_json() -> None:
    listed = '{"records": [{"id": "R-1", "status": "active"}, {"id": "R-2", "status": "active"}]}'
    known = known_after(CallRecord(index=0, tool="list", observation=listed))
    # field: a read shows another status than the world's state, with no write naming it
    (found,) = known.check("get", {"id": "R-2"}, '{"id": "R-2", "status": "closed"}', None, False)
    assert found.rule == "field" and found.earlier == 0 and "R-2.status is 'closed'" in found.message
    # count: the same read again shows another list
    (found,) = known.check("list", {}, '{"records": [{"id": "R-1", "status": "active"}]}', None, False)
    assert found.rule == "count" and "ids R-1, R-2" in found.message
    # missing: a record the session saw, said not found
    (found,) = known.check("get", {"id": "R-1"}, "Error: record R-1 not found", None, True)
    assert found.rule == "missing"
    # a write may change anything it names: its answer is not checked for fields, and a read after it is free
    assert known.check("update", {"id": "R-2"}, '{"id": "R-2", "status": "closed"}', None, False) == []
    known.add(CallRecord(index=1, tool="update", arguments={"id": "R-2"}, observation='{"id": "R-2"}'))
    assert known.check("get", {"id": "R-2"}, '{"id": "R-2", "status": "closed"}', None, False) == []
    assert known.check("list", {}, '{"records": []}', None, False) == []  # a write came between the reads
    # R-1 was not named by the write and keeps its status
    assert [
        f.rule for f in known.check("get", {"id": "R-1"}, '{"id": "R-1", "status": "x"}', None, False)
    ] == ["field"]


def test_deletion_is_read_from_the_answers() -> None:
    by_status = known_after(
        CallRecord(
            index=0, tool="update", arguments={"id": "R-1"}, observation='{"id": "R-1", "status": "deleted"}'
        )
    )
    by_text = known_after(
        CallRecord(index=0, tool="update", arguments={"id": "R-1"}, observation="Record R-1 removed.")
    )
    for known in (by_status, by_text):
        (found,) = known.check("list", {}, '[{"id": "R-1", "status": "active"}]', None, False)
        assert found.rule == "deleted" and found.earlier == 0
        assert known.check("get", {"id": "R-1"}, "Error 404: no such record", None, True) == []
    # A read's text never deletes: only a call that may write.
    assert (
        known_after(
            CallRecord(index=0, tool="get", arguments={"id": "R-1"}, observation="R-1 removed")
        ).check("list", {}, '[{"id": "R-1", "status": "active"}]', None, False)
        == []
    )
