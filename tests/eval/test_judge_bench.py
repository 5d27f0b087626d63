"""The judge protocol (`aw-mcp judge`) and AgentWorldBench runs (`aw-mcp bench`) against scripted servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aw_mcp.cli import main
from aw_mcp.core.errors import UsageError
from aw_mcp.eval.bench import Sample
from aw_mcp.eval.judging import (
    CLOSING,
    DIMENSIONS,
    judge_output,
    judge_system_prompt,
    load_closing,
    parse_judgement,
    sample_judge_user_message,
)
from aw_mcp.prompt.templates import BUNDLED
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


@pytest.mark.parametrize("raw", ["", "I refuse.", '{"verdict": "good"}'])
def test_judge_parser_gives_up_without_scores(raw: str) -> None:
    assert parse_judgement(raw) is None


def test_scores_that_are_all_invalid_are_still_an_answer_as_in_eval_py() -> None:
    """eval.py takes any "scores" object as the judge's answer (no retry); its zeros stay out of every mean."""
    judgement = parse_judgement('{"scores": {"format": 0, "quality": "n/a"}}')
    assert judgement is not None and set(judgement.scores.values()) == {0} and judgement.mean == 0.0


def test_scores_are_clamped_and_invalid_ones_left_out_of_the_mean() -> None:
    judgement = parse_judgement('{"scores": {"format": 9, "factuality": 0, "consistency": 1, "realism": 3}}')
    assert judgement is not None and judgement.scores["format"] == 5 and judgement.scores["quality"] == 0
    assert judgement.mean == 3.0


def test_the_closing_request_keeps_eval_py_s_structure_and_a_file_replaces_it(tmp_path) -> None:
    """Ours by default (eval.py's structure in our words: the five dimensions, the labelled 1-5 scale, reasoning
    first, the json block inside <final_evaluation>); `--judge-closing FILE` sends a file's text byte for byte."""
    for dimension in ("Format", "Factuality", "Consistency", "Realism", "Quality"):
        assert dimension in CLOSING.split("\n", 1)[0]
    labels = ["5 = Excellent", "4 = Good", "3 = Fair", "2 = Poor", "1 = Very Poor"]
    assert [line.split("**")[1] for line in CLOSING.splitlines() if line.startswith("- **")] == labels
    example = CLOSING.split("<final_evaluation>\n```json\n", 1)[1].split("\n```\n</final_evaluation>", 1)[0]
    assert [k.strip().split('"')[1] for k in example.splitlines() if k.strip().startswith('"')][:3] == [
        "strengths",
        "weaknesses",
        "scores",
    ]
    assert load_closing(None) == CLOSING
    official = tmp_path / "closing.txt"
    official.write_text("Please grade.\n  (exact bytes)\n", encoding="utf-8")
    sample = Sample(prompt=["### Turn 1\nA"], response=["R"], current_prompt="### Turn 1\nA", turn_idx=1)
    user = sample_judge_user_message(sample, "**Environment Observation:**\nX", load_closing(str(official)))
    assert user.endswith("```\n\nPlease grade.\n  (exact bytes)")  # the message's final strip, as eval.py's
    with pytest.raises(UsageError, match="--judge-closing .*cannot read"):
        load_closing(str(tmp_path / "missing.txt"))


def test_judge_message_is_eval_py_s_bytes() -> None:
    """Hand-derived from eval.py's build_judge_messages: context pairs as `prompt\\nresponse\\n\\n` (responses
    as recorded, marker and all), the template's blank line after it, `current_prompt` (not prompt[turn_idx-1]), both
    outputs marker-stripped and fenced as they are (inner fences kept), then the closing request."""
    sample = Sample(
        task="agentworldbench/mcp",
        prompt=["### Turn 1\n**Action:**\nA", "### Turn 2\n**Action:**\nB", "### Turn 3\n**Action:**\nC"],
        response=[
            "**Environment Observation:**\nfirst",
            '**Environment Observation:**\n```json\n{"ok": true}\n```',
            "**Environment Observation:**\n```\nthird\n```\n",
        ],
        current_prompt="### Turn 3\n**Action:**\nC, as the sample records it",
        turn_idx=3,
    )
    generation = "<think>plan it</think>\n\n**Environment Observation:**\n```\nthird\n```"
    expected = (
        "# Context (Historical Interactions):\n\n"
        "### Turn 1\n**Action:**\nA\n**Environment Observation:**\nfirst\n\n"
        '### Turn 2\n**Action:**\nB\n**Environment Observation:**\n```json\n{"ok": true}\n```\n\n'
        "\n\n"
        "# Current Turn:\n\n### Turn 3\n**Action:**\nC, as the sample records it\n\n"
        "**World Model Output (Simulated):**\n```\n```\nthird\n```\n```\n\n"
        "**Ground Truth (Real Output):**\n```\n```\nthird\n```\n```\n\n"
    )
    assert sample_judge_user_message(sample, generation) == expected + CLOSING


def test_first_turn_judge_message_starts_at_the_current_turn() -> None:
    """No context: the template's leading blank line is stripped away. An empty current_prompt falls back to the
    turn's prompt; a missing response is an empty ground truth; a tagged answer is its last block, unfenced."""
    sample = Sample(task="agentworldbench/web", prompt=["### Turn 1\nclick('12')"], response=[], turn_idx=1)
    generation = (
        "<think>maybe <predicted_observation>draft</predicted_observation>\n</think>"
        "<predicted_observation>\nRootWebArea 'Cart'\n</predicted_observation>"
    )
    expected = (
        "# Current Turn:\n\n### Turn 1\nclick('12')\n\n"
        "**World Model Output (Simulated):**\n```\nRootWebArea 'Cart'\n```\n\n"
        "**Ground Truth (Real Output):**\n```\n\n```\n\n"
    )
    assert sample_judge_user_message(sample, generation) == expected + CLOSING


@pytest.mark.parametrize(
    ("generation", "extracted"),
    [
        ("", "No output"),
        ("<think>only thinking</think>", "No output"),
        ("  plain answer \n", "plain answer"),  # no tags: stripped
        # A stray close tag takes what precedes it; the marker is left to the message (both sides lose it there).
        ("stray</think>\n**Environment Observation:**\nok", "**Environment Observation:**\nok"),
        ("<think>a<think>b</think>c</think>rest", "rest"),  # nested blocks merge
        ("<think>unclosed <predicted_observation>x</predicted_observation>", "x"),  # stops at the answer tag
        ("<think>unclosed, no answer", "No output"),
        ("<predicted_observation>a</predicted_observation><predicted_observation> b ", "b"),  # last, unclosed
        # Tags in any case; an inner fence is kept, as on the ground truth's side.
        ("<PREDICTED_OBSERVATION>\n```\nfenced\n```\n</predicted_observation>", "```\nfenced\n```"),
        ("<predicted_observation></predicted_observation>", ""),  # an empty block stays empty
    ],
)
def test_judge_output_extracts_the_answer_as_eval_py(generation: str, extracted: str) -> None:
    assert judge_output(generation) == extracted


OFFICIAL_SECTIONS = {
    # The official rubrics' section structure (headers only), per domain family.
    "mcp": ["# Role and Objective", "# Content Type Classification", "# Evaluation Dimensions"],
    "swe": ["# Role and Objective", "# Content Type Classification", "# Evaluation Dimensions"],
    "terminal": ["# Role and Objective", "# Content Type Classification", "# Evaluation Dimensions"],
    "search": ["# Role and Objective", "# Evaluation Dimensions"],
}
GUI_SECTIONS = [
    "Core Principle",
    "{anchors}",
    "Strictness Rules",
    "Tie Breakers",
    "Score Separation Policy",
    "Dimension-Specific Scoring Anchors",
    "Discriminative Error Calibration",
    "Fine-Grained Openended Separation Calibration",
    "Active-Region Coverage Calibration",
    "Final-Answer Discipline Calibration",
    "Missing Final Observation Calibration",
]


@pytest.mark.parametrize("domain", ["mcp", "search", "terminal", "swe", "android", "web", "os"])
def test_rubrics_have_the_official_structure(domain: str) -> None:
    rubric = judge_system_prompt(BUNDLED.load(domain, "judge_system_prompt"), None)
    headers = [line for line in rubric.splitlines() if line.startswith("#")]
    if domain in OFFICIAL_SECTIONS:
        assert [h for h in headers if h.startswith("# ")] == OFFICIAL_SECTIONS[domain]
        dimensions = [h for h in headers if h.startswith("## ")]
        assert [h.split(" ")[2].lower() for h in dimensions] == list(DIMENSIONS)
        assert rubric.count("**Definition:**") == 5 and rubric.count("**Key Points:**") == 5
        if domain != "search":
            assert "| Content Type | Verification Standard | Examples |" in rubric
    else:
        anchors = {"android": "Android Anchors", "web": "Web Anchors", "os": "Desktop Anchors"}[domain]
        assert headers[0] == "# Role and Objective"
        assert [h[3:] for h in headers[1:]] == [anchors if s == "{anchors}" else s for s in GUI_SECTIONS]
    # Without a world reference (a benchmark sample) the rubric is all there is: no slot, no empty section.
    assert "World Reference" not in rubric and "{" + "world_reference}" not in rubric
    assert rubric.endswith(".\n")
    with_reference = judge_system_prompt(BUNDLED.load(domain, "judge_system_prompt"), "World: shop (mcp)")
    assert with_reference.startswith(rubric.rstrip("\n") + "\n\n---\n\n# World Reference\n\n")
    assert with_reference.endswith("World: shop (mcp)\n")


WORLD = "name: repo\ndomain: swe\nnow: '2026-01-01T00:00:00Z'\nfacts: [The repo has 3 files.]\n"


def record_session(tmp_path: Path) -> Path:
    world = tmp_path / "repo.yaml"
    world.write_text(WORLD, encoding="utf-8")
    trajectory = tmp_path / "t.jsonl"
    answers = [Reply(content="**Environment Observation:**\na.py b.py c.py"), Reply(content="x = 1")]
    with ScriptedOpenAIServer(answers) as server:
        for n, command in enumerate(("ls", "cat a.py")):
            arguments = json.dumps({"command": command})
            argv = ["call", "--world", str(world), "run_shell_command", "--args", arguments]
            keep = ["--record" if n == 0 else "--resume", str(trajectory)]
            assert main([*argv, "--base-url", server.base_url, *keep]) == 0
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
    # The context keeps each turn's trailing blank line: three blank lines before the current turn, as in eval.py.
    assert (
        "\n**Environment Observation:**\na.py b.py c.py\n\n\n\n# Current Turn:\n\n### Turn 2\n**Action:**"
        in user
    )
    assert user.endswith(CLOSING)
    assert "**World Model Output (Simulated):**\n```\nx = 1\n```" in user
    assert "**Ground Truth (Real Output):**\n```\n(No real output was recorded" in user
    assert "<final_evaluation>" in user and body["max_tokens"] == 32768 and body["temperature"] == 0.6
    lines = [json.loads(x) for x in (tmp_path / "t.judge.jsonl").read_text().splitlines()]
    assert [(x["index"], x["judgement"]["score"], x["against"]) for x in lines] == [
        (0, 75.0, "world"),
        (1, 75.0, "world"),
    ]
    out = capsys.readouterr().out
    assert "session default: 75.00 over 2 judged call(s)" in out and "against the world reference" in out
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


def sample_line(key: str, domain: str, **extra: Any) -> dict[str, Any]:
    """A two-turn AgentWorldBench line whose second turn is judged (`extra`: e.g. the reply as `gen`)."""
    return {
        "id": key,
        "task": f"agentworldbench/{domain}",
        "system_str": f"SYSTEM {domain}",
        "prompt": ["### Turn 1\n**Action:**\nA", "### Turn 2\n**Action:**\nB"],
        "response": ["**Environment Observation:**\nfirst", "**Environment Observation:**\nsecond"],
        "current_prompt": "### Turn 2\n**Action:**\nB",
        "turn_idx": 2,
        "total_turns": 2,
        **extra,
    }


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def bench_file(tmp_path: Path) -> Path:
    domains = ["mcp", "search", "terminal", "swe", "android", "web", "os"]
    return write_lines(tmp_path / "bench.jsonl", [sample_line(f"s{i}", d) for i, d in enumerate(domains)])


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
