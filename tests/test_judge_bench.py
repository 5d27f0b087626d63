"""The judge protocol (`aw-mcp judge`) and AgentWorldBench runs (`aw-mcp bench`) against scripted servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aw_mcp.cli import main
from aw_mcp.judging import parse_judgement
from tests.fake_openai import Reply, ScriptedOpenAIServer

SCORES = '{"format": 5, "factuality": 4, "consistency": 5, "realism": 4, "quality": 2}'
GOOD = f'Thinking about it.\n<final_evaluation>\n```json\n{{"strengths": ["shape"], "weaknesses": ["stale id"], "scores": {SCORES}}}\n```\n</final_evaluation>'


@pytest.mark.parametrize(
    "raw",
    [
        GOOD,
        f'no tag at all, just {{"strengths": [], "scores": {SCORES}}} at the end',
        f'```json\n{{"weaknesses": ["stale id"], "scores": {SCORES},}}\n```',  # fenced, trailing comma
        f'<think>draft {{"scores": {{"format": 1}}}}</think><final_evaluation>{{\'scores\': {SCORES},}}',
        f'<final_evaluation>\n{{scores: {SCORES}, weaknesses: ["stale id"],}}\n',  # bare keys, unclosed tag
        '{"scores": {"format": "5/5", "factuality": 4.2, "consistency": 5, "realism": "4", "quality": 2}}',
    ],
)
def test_forgiving_judge_parser(raw: str) -> None:
    judgement = parse_judgement(raw)
    assert judgement is not None
    assert judgement.scores == {"format": 5, "factuality": 4, "consistency": 5, "realism": 4, "quality": 2}
    assert judgement.mean == 4.0 and judgement.score == 75.0


@pytest.mark.parametrize("raw", ["", "I refuse.", '{"verdict": "good"}', '{"scores": {"format": 0}}'])
def test_judge_parser_gives_up_without_scores(raw: str) -> None:
    assert parse_judgement(raw) is None


def test_scores_are_clamped_and_invalid_ones_left_out_of_the_mean() -> None:
    judgement = parse_judgement('{"scores": {"format": 9, "factuality": 0, "consistency": 1, "realism": 3}}')
    assert judgement is not None and judgement.scores["format"] == 5 and judgement.scores["quality"] == 0
    assert judgement.mean == 3.0


WORLD = "name: repo\ndomain: swe\nnow: '2026-01-01T00:00:00Z'\nfacts: [The repo has 3 files.]\n"


def record_session(tmp_path: Path) -> Path:
    world = tmp_path / "repo.yaml"
    world.write_text(WORLD, encoding="utf-8")
    trajectory = tmp_path / "t.jsonl"
    answers = [Reply(content="**Environment Observation:**\na.py b.py c.py"), Reply(content="x = 1")]
    with ScriptedOpenAIServer(answers) as server:
        for command in ("ls", "cat a.py"):
            argv = ["call", "--world", str(world), "execute_bash", "--args", json.dumps({"command": command})]
            assert (
                main(
                    [
                        *argv,
                        "--base-url",
                        server.base_url,
                        "--record",
                        str(trajectory),
                        "--resume",
                        str(trajectory),
                    ]
                )
                == 0
            )
    return trajectory


def test_judge_scores_a_recorded_session_and_survives_malformed_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trajectory = record_session(tmp_path)
    world = str(tmp_path / "repo.yaml")
    malformed = (
        f'Reasoning...\n```json\n{{"strengths": [], "scores": {SCORES},}}\n```'  # no tag, trailing comma
    )
    with ScriptedOpenAIServer(
        [Reply(content="no scores here"), Reply(content=malformed), Reply(content=GOOD)]
    ) as judge:
        assert (
            main(["judge", str(trajectory), "--base-url", judge.base_url, "--model", "j", "--world", world])
            == 0
        )
    assert len(judge.requests) == 3  # call 1: unparsable, asked again; call 2: first answer parsed
    body = judge.requests[2].body
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert (
        system.startswith("# Role and Objective") and "The repo has 3 files." in system
    )  # the world reference
    assert user.startswith("# Context (Historical Interactions):\n\n### Turn 1\n**Action:**")
    assert (
        "\n**Environment Observation:**\na.py b.py c.py\n\n# Current Turn:\n\n### Turn 2\n**Action:**" in user
    )
    assert "**World Model Output (Simulated):**\n```\nx = 1\n```" in user
    assert "**Ground Truth (Real Output):**\n```\n(No real output was recorded" in user
    assert "<final_evaluation>" in user and body["max_tokens"] == 32768 and body["temperature"] == 0.6
    lines = [json.loads(x) for x in (tmp_path / "t.judge.jsonl").read_text().splitlines()]
    assert [(x["index"], x["judgement"]["score"], x["against"]) for x in lines] == [
        (0, 75.0, "world"),
        (1, 75.0, "world"),
    ]
    out = capsys.readouterr().out
    assert "session default: 75.00 over 2 judged call(s)" in out and "against the world itself" in out
    html = (tmp_path / "t.html").read_text()
    assert "<h2>Judge scores</h2>" in html and "stale id" in html
    # With a reference, the real output is the ground truth; calls already judged are not asked again.
    reference = tmp_path / "ref.jsonl"
    reference.write_text('{"index": 1, "observation": "x = 2"}\n', encoding="utf-8")
    (tmp_path / "t.judge.jsonl").write_text(json.dumps(lines[0]) + "\n", encoding="utf-8")
    with ScriptedOpenAIServer([Reply(content=GOOD)]) as judge:
        argv = ["judge", str(trajectory), "--base-url", judge.base_url, "--model", "j", "--world", world]
        assert main([*argv, "--reference", str(reference)]) == 0
    assert len(judge.requests) == 1
    assert (
        "**Ground Truth (Real Output):**\n```\nx = 2\n```" in judge.requests[0].body["messages"][1]["content"]
    )


def bench_file(tmp_path: Path) -> Path:
    lines = []
    for i, domain in enumerate(["mcp", "search", "terminal", "swe", "android", "web", "os"]):
        lines.append(
            {
                "id": f"s{i}",
                "task": f"agentworldbench/{domain}",
                "system_str": f"SYSTEM {domain}",
                "prompt": ["### Turn 1\n**Action:**\nA", "### Turn 2\n**Action:**\nB"],
                "response": ["**Environment Observation:**\nfirst", "**Environment Observation:**\nsecond"],
                "current_prompt": "### Turn 2\n**Action:**\nB",
                "turn_idx": 2,
                "total_turns": 2,
            }
        )
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def judge_by_domain(body: dict, n: int) -> Reply:
    score = 5 if "Desktop World Model" in body["messages"][0]["content"] else 3
    scores = {d: score for d in ("format", "factuality", "consistency", "realism", "quality")}
    return Reply(content=f"<final_evaluation>{json.dumps({'scores': scores})}</final_evaluation>")


def test_bench_prints_the_table_and_resumes_without_asking_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bench_file(tmp_path)
    answer = Reply(content="<think>x</think><predicted_observation>\nsecond\n</predicted_observation>")
    with ScriptedOpenAIServer([answer]) as world, ScriptedOpenAIServer(judge_by_domain) as judge:
        argv = [
            "bench",
            str(data),
            "--base-url",
            world.base_url,
            "--model",
            "m",
            "--judge-base-url",
            judge.base_url,
        ]
        assert main([*argv, "--judge-model", "j", "-j", "3"]) == 0
        first = world.requests[0].body["messages"]
        assert [m["role"] for m in first] == ["system", "user", "assistant", "user"]
        assert (
            first[0]["content"].startswith("SYSTEM ")
            and first[2]["content"] == "**Environment Observation:**\nfirst"
        )
        assert world.requests[0].body["max_tokens"] == 32768 and len(world.requests) == 7
        judged = judge.requests[0].body["messages"][1]["content"]
        assert "**World Model Output (Simulated):**\n```\nsecond\n```" in judged
        assert "**Ground Truth (Real Output):**\n```\nsecond\n```" in judged
        out = capsys.readouterr().out
        rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
        assert rows["OS"][1] == "1/1" and rows["OS"][-1] == "100.00" and rows["MCP"][-1] == "50.00"
        assert rows["Overall"] == ["Overall", "7", "57.14"]  # (mean of 3,3,3,3,3,3,5 - 1) / 4 x 100
        # A killed run: three result lines survived, a fourth was cut short mid-write.
        results = data.with_suffix(".results.jsonl")
        kept = results.read_text().splitlines()[:3]
        results.write_text("\n".join(kept) + '\n{"key": "id:s', encoding="utf-8")
        assert main([*argv, "--judge-model", "j"]) == 0
        assert len(world.requests) == 7 + 4  # only the four unfinished samples were asked again
    asked_again = {m["messages"][0]["content"] for m in (r.body for r in world.requests[7:])}
    assert len(asked_again) == 4
    assert "Overall" in capsys.readouterr().out
