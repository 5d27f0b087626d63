"""Shadow predictions off the agent's path, and calibration of them: a scripted world model (tests/fake_openai.py,
slow on purpose) predicts server-memory's answers, right for read_graph, one field wrong for search_nodes, an error
for create_entities; the agent gets every real answer before its prediction is written, every call carries a
prediction, and `aw-mcp calibrate` reports exactly those agreement rates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from aw_mcp.cli import main
from aw_mcp.trajectory.records import read_lines, read_trajectory
from tests.fake_openai import Reply, ScriptedOpenAIServer
from tests.mirror.test_mirror_real_servers import mirror
from tests.mirror.upstreams import upstream

pytestmark = pytest.mark.timeout(180)

ADA = {"name": "Ada", "entityType": "person", "observations": ["math"]}
GRAPH = {"entities": [ADA], "relations": []}
WRONG = {"entities": [{**ADA, "name": "Bob"}], "relations": []}  # one of four fields wrong
PREDICTION_DELAY_S = 1.5  # the model is slow on purpose; the upstream answers in milliseconds


def predict(body: dict[str, Any], number: int) -> Reply:
    """Right about read_graph, one field wrong about search_nodes, an error for create_entities."""
    turn = body["messages"][-1]["content"]
    if "search_nodes" in turn:
        answer = json.dumps(WRONG)
    elif "read_graph" in turn:
        answer = json.dumps(GRAPH)
    else:
        answer = "Error: the entity store is unavailable"
    return Reply(content=f"**Environment Observation:**\n{answer}", delay_s=PREDICTION_DELAY_S)


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("create_entities", {"entities": [ADA]}),
    ("read_graph", {}),
    ("search_nodes", {"query": "Ada"}),
    ("read_graph", {}),
    ("search_nodes", {"query": "math"}),
]


def shadow_lines(path: Path) -> int:
    return sum(1 for line in read_lines(path) if line.type == "shadow") if path.exists() else 0


@pytest.fixture(scope="module")
def shadowed_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One mirror --shadow session of CALLS; what the agent saw and when the predictions were written."""
    memory = [upstream("mcp-server-memory")]
    folder = tmp_path_factory.mktemp("shadow")
    record = folder / "run.jsonl"
    written_before_answer: list[int] = []

    async def drive(server: ScriptedOpenAIServer) -> list[Any]:
        params = mirror(
            memory,
            "--record", str(record), "--shadow", "--base-url", server.base_url, "--model", "fake-world-model",
            "--shadow-concurrency", "2",
            env={"MEMORY_FILE_PATH": str(folder / "memory.jsonl")},
        )  # fmt: skip
        results = []
        async with Client(params, mode="legacy") as client:
            for number, (name, arguments) in enumerate(CALLS):
                results.append(await client.call_tool(name, arguments))
                # the answer is here; this call's prediction (1.5 s of model time) is not written yet
                written_before_answer.append(shadow_lines(record) - number)
            with anyio.fail_after(PREDICTION_DELAY_S * len(CALLS) * 10):
                while shadow_lines(record) < len(CALLS):
                    await anyio.sleep(0.05)
        return results

    with ScriptedOpenAIServer(predict) as server:
        results = anyio.run(drive, server)
        requests = len(server.requests)
    return {
        "record": record,
        "results": results,
        "written_before": written_before_answer,
        "requests": requests,
    }


def test_the_agent_gets_each_real_answer_before_its_prediction_and_every_call_carries_one(
    shadowed_run: dict[str, Any],
) -> None:
    assert all(before <= 0 for before in shadowed_run["written_before"]), shadowed_run["written_before"]
    results = shadowed_run["results"]
    assert not any(r.is_error for r in results)  # the agent saw the real answers, not the predictions
    assert json.loads(results[1].content[0].text) == GRAPH
    calls = list(read_trajectory(shadowed_run["record"]))
    assert len(calls) == len(CALLS) == shadowed_run["requests"]
    for call in calls:
        assert call.answered_by == "upstream" and call.shadow is not None and call.shadow.error is None
        assert (
            call.shadow.model == "fake-world-model"
            and call.shadow.latency_ms >= PREDICTION_DELAY_S * 1000 * 0.9
        )
        assert call.latency_ms < call.shadow.latency_ms  # the real answer did not wait for the prediction
    assert calls[0].shadow.is_error and not calls[0].is_error
    assert calls[1].shadow.structured == GRAPH


def test_calibrate_reports_exactly_the_scripted_agreement_rates(
    shadowed_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", str(shadowed_run["record"]), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    world, tools = document["world"], document["tools"]
    assert (world["calls"], world["predicted"], world["coverage"]) == (5, 5, 1.0)
    assert world["error_agreement"] == 0.8 and world["errors_caught"] is None and world["errors_real"] == 0.0
    assert (
        tools["create_entities"]["error_agreement"] == 0.0
        and tools["create_entities"]["predicted_errors"] == 1
    )
    assert tools["read_graph"]["structure"] == 1.0 and tools["read_graph"]["values"] == 1.0
    assert tools["search_nodes"]["structure"] == 1.0 and tools["search_nodes"]["values"] == 0.75
    assert tools["search_nodes"]["fields"]["entities[].name"] == 0.0
    assert tools["search_nodes"]["fields"]["entities[].entityType"] == 1.0
    assert world["structure"] == 1.0 and world["values"] == 14 / 16
    worst = document["worst"]
    assert worst[0]["tool"] == "create_entities" and worst[0]["agreement"] == 0.0
    assert {d["tool"] for d in worst[1:]} == {"search_nodes"} and worst[1]["agreement"] == 0.75

    assert main(["calibrate", str(shadowed_run["record"])]) == 0
    text = capsys.readouterr().out
    assert "search_nodes" in text and "worst divergences" in text and "predicted:" in text


def test_calibrate_fail_on_is_a_gate(
    shadowed_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    record = str(shadowed_run["record"])
    assert main(["calibrate", record, "--fail-on", "values=0.8,error_agreement=0.8"]) == 0
    assert main(["calibrate", record, "--fail-on", "values=0.9"]) == 1
    assert "FAIL values 87.50% < 90.00%" in capsys.readouterr().err
    assert main(["calibrate", record, "--fail-on", "errors_caught=0.5"]) == 1  # no real error: not measured
    assert main(["calibrate", record, "--fail-on", "nonsense=1"]) == 2


def test_the_html_report_has_a_calibration_section(shadowed_run: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(shadowed_run["record"]), "-o", str(out)]) == 0
    page = out.read_text()
    section = page[page.index('<section id="calibration">') :]
    section = section[: section.index("</section>")]
    assert "5 of 5 real answers have a shadow prediction" in section
    assert "<td>search_nodes</td>" in section and "75%" in section and "88%" in section  # values 0.75, 14/16
    assert "Worst divergences" in section and "only the prediction is an error" in section


def test_calibrate_judge_scores_each_prediction_against_the_real_answer(
    shadowed_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The judge (the scripted server again) sees the prediction and the real answer of each call; it scores the
    read_graph predictions 5 on every dimension and the others 2, so the judge rate is exactly that mean."""
    seen: list[str] = []

    def judge(body: dict[str, Any], number: int) -> Reply:
        user = body["messages"][-1]["content"]
        seen.append(user)
        good = "World Model Output (Simulated):**\n```\n" + json.dumps(GRAPH) in user
        score = 5 if good else 2
        scores = {d: score for d in ("format", "factuality", "consistency", "realism", "quality")}
        return Reply(content=f"<final_evaluation>{json.dumps({'scores': scores})}</final_evaluation>")

    with ScriptedOpenAIServer(judge) as server:
        code = main(
            ["calibrate", str(shadowed_run["record"]), "--json", "--judge", "--base-url", server.base_url,
             "--model", "judge"]
        )  # fmt: skip
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert len(seen) == 5 and all("Ground Truth (Real Output)" in s for s in seen)
    assert (
        document["tools"]["read_graph"]["judge"] == 1.0 and document["tools"]["search_nodes"]["judge"] == 0.25
    )
    assert document["world"]["judged"] == 5 and document["world"]["judge"] == round(
        (2 * 1.0 + 3 * 0.25) / 5, 4
    )


def test_predictions_still_running_when_the_session_ends_are_cancelled_and_recorded_so(
    tmp_path: Path,
) -> None:
    memory = [upstream("mcp-server-memory")]
    record = tmp_path / "run.jsonl"

    def never_in_time(body: dict[str, Any], number: int) -> Reply:
        return Reply(content="**Environment Observation:**\n{}", delay_s=60)

    async def drive(server: ScriptedOpenAIServer) -> None:
        params = mirror(
            memory,
            "--record", str(record), "--shadow", "--base-url", server.base_url, "--model", "fake-world-model",
            env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")},
        )  # fmt: skip
        async with Client(params, mode="legacy") as client:
            for _ in range(3):  # two predictions running (the concurrency), one waiting for a slot
                assert not (await client.call_tool("read_graph", {})).is_error
            with anyio.fail_after(30):
                while len(server.requests) < 2:
                    await anyio.sleep(0.05)

    with ScriptedOpenAIServer(never_in_time) as server:
        anyio.run(drive, server)
    calls = list(read_trajectory(record))
    assert len(calls) == 3
    assert all(
        c.shadow is not None and c.shadow.error is not None and c.shadow.error.startswith("cancelled")
        for c in calls
    )
