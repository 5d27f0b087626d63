"""Issue 33, item 5: `--backend hybrid --replay TRAJECTORY` answers what the recording knows from it and the rest by
the world model; replayed calls never reach the model server; every answer says where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aw_mcp import Env
from aw_mcp.backends.hybrid import Recording
from aw_mcp.core.model_io import CallRef
from aw_mcp.eval.report import summarize, text_summary
from aw_mcp.trajectory.records import CallRecord, read_trajectory
from tests.conftest import SMALL_WORLD
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.anyio

RECORDED = [
    ("get_order", {"order_id": "ORD-1001"}),
    ("cancel_order", {"order_id": "ORD-1001"}),
    ("get_order", {"order_id": "ORD-1001"}),
]


def recorded_answers(body: dict, call_number: int) -> Reply:
    """The 'real' run: the order ships, is cancelled, then reads back cancelled (the call number shows in total)."""
    last = body["messages"][-1]["content"]
    if "cancel_order" in last.split("**Action:**")[-1]:
        return Reply(content="**Environment Observation:**\nOrder ORD-1001 cancelled.")
    status = "cancelled" if call_number else "shipped"
    return Reply(
        content=f'**Environment Observation:**\n{{"id": "ORD-1001", "status": "{status}", "total": {call_number}}}'
    )


def model_answers(body: dict, call_number: int) -> Reply:
    return Reply(content='**Environment Observation:**\n{"id": "ORD-2002", "status": "pending", "total": 99}')


@pytest.fixture
def world(tmp_path: Path) -> Path:
    path = tmp_path / "shop.yaml"
    path.write_text(SMALL_WORLD)
    return path


async def record_real_run(world: Path, path: Path) -> list[str]:
    """The recorded run, answered by the plain world model: what the agent saw."""
    with ScriptedOpenAIServer(recorded_answers) as server:
        async with await Env.open(
            world, base_url=server.base_url, model="m", record=str(path), thinking=False
        ) as env:
            results = [await env.call(tool, arguments) for tool, arguments in RECORDED]
    assert (
        not any(r.is_error for r in results) and source(results[0]) is None
    )  # a plain model answer: no _meta
    return [r.content[0].text for r in results]


async def open_hybrid(
    world: Path, recording: Path, server: ScriptedOpenAIServer, trajectory: Path, **options: object
) -> Env:
    """The world on the hybrid backend: `recording` first, the scripted model server for the rest."""
    return await Env.open(
        world,
        backend="hybrid",
        replay=str(recording),
        base_url=server.base_url,
        model="m",
        record=str(trajectory),
        thinking=False,
        **options,
    )


def source(result: object) -> str | None:
    meta = getattr(result, "meta", None) or {}
    return meta.get("answered_by")


async def test_recorded_calls_never_reach_the_model_and_the_rest_do(world: Path, tmp_path: Path) -> None:
    recording = tmp_path / "real.jsonl"
    seen = await record_real_run(world, recording)
    trajectory = tmp_path / "hybrid.jsonl"
    with ScriptedOpenAIServer(model_answers) as server:
        async with await open_hybrid(world, recording, server, trajectory) as env:
            replayed = [await env.call(tool, arguments) for tool, arguments in RECORDED]
            assert len(server.requests) == 0  # the same calls after the same calls: all from the recording
            # A call the recording never saw goes to the model, which sees the recording's answers as history.
            unmatched = await env.call("get_order", {"order_id": "ORD-2002"})
            assert len(server.requests) == 1
            prompt = json.dumps(server.requests[0].body["messages"])
            assert "Order ORD-1001 cancelled." in prompt
            # Read-only: the same call anywhere in the recording is replayed, whatever came before it.
            again = await env.call("get_order", {"order_id": "ORD-1001"})
            # Not read-only and after other calls than in the recording: the model answers.
            cancel = await env.call("cancel_order", {"order_id": "ORD-1001"})
            assert len(server.requests) == 2
    assert [r.content[0].text for r in replayed] == seen  # byte for byte what the recorded run saw
    assert [source(r) for r in replayed] == ["recording"] * 3
    assert source(unmatched) == "model" and json.loads(unmatched.content[0].text)["id"] == "ORD-2002"
    assert source(again) == "recording" and again.content[0].text == seen[0]
    assert source(cancel) == "model"
    lines = list(read_trajectory(trajectory))
    assert [r.answered_by for r in lines] == ["recording"] * 3 + ["model", "recording", "model"]


def test_a_mirror_recording_replays_the_real_answer_before_any_fault() -> None:
    real = CallRecord(
        session="s", index=0, tool="t", observation="faulted", truth="real", answered_by="upstream"
    )
    aborted = CallRecord(
        session="s", index=1, tool="t", arguments={"a": 1}, observation="x", in_history=False
    )
    cancelled = CallRecord(session="s", index=2, tool="u", error="cancelled by the client")
    recording = Recording([real, aborted, cancelled])
    first = recording.answer(CallRef("t", {}, 0), read_only=False)
    assert first is not None and first.text == "real" and first.extra == {"answered_by": "recording"}
    # After a different first call, only a read-only tool matches anywhere.
    assert recording.answer(CallRef("t", {}, 0, (("u", {}),)), read_only=False) is None
    assert recording.answer(CallRef("t", {}, 0, (("u", {}),)), read_only=True) is not None
    # What the agent saw was a fault's (no truth, not in history), or there was no answer: nothing to replay.
    assert recording.answer(CallRef("t", {"a": 1}, 1, (("t", {}),)), read_only=True) is None
    assert recording.answer(CallRef("u", {}, 2, (("t", {}), ("t", {"a": 1}))), read_only=False) is None


def test_a_fork_replays_its_parents_calls_first() -> None:
    parent = [
        CallRecord(session="p", index=i, tool="t", arguments={"i": i}, observation=f"p{i}") for i in range(3)
    ]
    fork = CallRecord(
        session="f",
        index=1,
        tool="t",
        arguments={"i": 9},
        observation="f1",
        forked_from={"session": "p", "call": 1},
    )
    recording = Recording([*parent, fork])
    found = recording.answer(CallRef("t", {"i": 9}, 1, (("t", {"i": 0}),)), read_only=False)
    assert found is not None and found.text == "f1"


async def test_the_report_counts_each_source(world: Path, tmp_path: Path) -> None:
    recording = tmp_path / "real.jsonl"
    await record_real_run(world, recording)
    trajectory = tmp_path / "hybrid.jsonl"
    with ScriptedOpenAIServer(model_answers) as server:
        async with await open_hybrid(world, recording, server, trajectory) as env:
            await env.call(*RECORDED[0])
            await env.call("get_order", {"order_id": "ORD-2002"})
    assert "answered by: model 1, recording 1" in text_summary(summarize(trajectory)) or (
        "answered by: recording 1, model 1" in text_summary(summarize(trajectory))
    )
    # A plain run says nothing of it.
    assert "answered by" not in text_summary(summarize(recording))


async def test_behind_the_cache_a_rerun_names_the_cache(world: Path, tmp_path: Path) -> None:
    recording = tmp_path / "real.jsonl"
    await record_real_run(world, recording)
    runs = []
    with ScriptedOpenAIServer(model_answers) as server:
        for _ in range(2):
            trajectory = tmp_path / f"run{len(runs)}.jsonl"
            async with await open_hybrid(
                world, recording, server, trajectory, cache=str(tmp_path / "cache")
            ) as env:
                results = [
                    await env.call(*RECORDED[0]),
                    await env.call("get_order", {"order_id": "ORD-2002"}),
                ]
            runs.append(([source(r) for r in results], [r.answered_by for r in read_trajectory(trajectory)]))
        assert len(server.requests) == 1  # the unmatched call asked the model once; the rerun read the cache
    assert runs == [(["recording", "model"],) * 2, (["recording", "cache"],) * 2]
    # CI without a model server: replay-only opens no model; the recording and the cache answer everything known.
    async with await Env.open(
        world,
        backend="hybrid",
        replay=str(recording),
        cache=str(tmp_path / "cache"),
        cache_mode="replay-only",
        model="m",
        thinking=False,
    ) as env:
        known = [await env.call(*RECORDED[0]), await env.call("get_order", {"order_id": "ORD-2002"})]
        unknown = await env.call("get_order", {"order_id": "ORD-3003"})
    assert [source(r) for r in known] == ["recording", "cache"] and not any(r.is_error for r in known)
    assert unknown.is_error
