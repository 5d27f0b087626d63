"""The judge and the bench as the official eval.py runs them (issue 31, items 1 and 7): the judge's context is each
earlier turn once, in order; a rubric without a `{world_reference}` slot still gets the reference the message
names; a failing judge call is asked again, 2 s apart, 3 tries in all; and `aw-mcp bench` judges degenerate
answers and scores them into the same table eval.py prints for the same predictions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aw_mcp.cli import main
from aw_mcp.core.model_io import BackendError, ChatMessage, Generation, GenerationParams
from aw_mcp.eval.judging import (
    CLOSING,
    JUDGE_ATTEMPTS,
    JUDGE_RETRY_DELAY_S,
    NO_REFERENCE,
    judge_one,
    judge_system_prompt,
    world_reference,
)
from aw_mcp.load.world import load_world
from aw_mcp.prompt.templates import BUNDLED
from tests.eval.test_judge_bench import sample_line, write_lines
from tests.fake_openai import Reply, ScriptedOpenAIServer

SCORES = {"format": 5, "factuality": 4, "consistency": 4, "realism": 3, "quality": 4}
GOOD = f"Fine.\n<final_evaluation>\n```json\n{json.dumps({'scores': SCORES})}\n```\n</final_evaluation>"

NOTES_WORLD = """\
name: notes
description: A note-taking service.
now: '2026-01-01T00:00:00Z'
facts: [Notes are numbered from 1.]
tools:
  - name: add_note
    description: Store a note.
    inputSchema:
      type: object
      properties: {text: {type: string}}
      required: [text]
"""


def turn(k: int) -> str:
    """Turn k of the recorded session as the world model saw it (and so as the judge must see it)."""
    action = json.dumps({"name": "add_note", "arguments": {"text": f"note {k}"}}, indent=2)
    return f"### Turn {k}\n**Action:**\n```json\n{action}\n```"


def reply(k: int) -> str:
    return f"**Environment Observation:**\nStored note {k}."


def record_five_calls(tmp_path: Path) -> tuple[Path, Path]:
    world = tmp_path / "notes.yaml"
    world.write_text(NOTES_WORLD, encoding="utf-8")
    trajectory = tmp_path / "t.jsonl"
    answers = [Reply(content=reply(k)) for k in range(1, 6)]
    with ScriptedOpenAIServer(answers) as server:
        for k in range(1, 6):
            argv = ["call", "--world", str(world), "add_note", "--args", json.dumps({"text": f"note {k}"})]
            keep = [
                "--record" if k == 1 else "--resume",
                str(trajectory),
            ]  # one session, recorded call by call
            flags = ["--base-url", server.base_url, *keep]
            assert main([*argv, *flags]) == 0
    return world, trajectory


def run_judge(trajectory: Path, world: Path, *extra: str) -> ScriptedOpenAIServer:
    """`aw-mcp judge` against a judge that always gives GOOD; the server, to read what it was sent."""
    with ScriptedOpenAIServer([Reply(content=GOOD)]) as judge:
        argv = ["judge", str(trajectory), "--base-url", judge.base_url, "--model", "j", "--world", str(world)]
        assert main([*argv, *extra]) == 0
    return judge


def test_the_judge_sees_each_earlier_turn_once_in_order(tmp_path: Path) -> None:
    """eval.py's context for turn k is the k-1 earlier (prompt, response) pairs, in order, once each. Before, the
    pairs overlapped ((u1,a1), (a1,u2), (u2,a2), ...): from the third judged call on, turns came twice and
    interleaved. Every message the judge received is checked."""
    world_path, trajectory = record_five_calls(tmp_path)
    judge = run_judge(trajectory, world_path)
    assert len(judge.requests) == 5
    world = load_world(world_path)
    system = judge_system_prompt(
        BUNDLED.load("mcp", "judge_system_prompt"), world_reference(world, "add_note")
    )
    for k, request in enumerate(judge.requests, start=1):
        messages = request.body["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[0]["content"] == system
        history = "".join(f"{turn(i)}\n{reply(i)}\n\n" for i in range(1, k))
        expected = [f"# Context (Historical Interactions):\n\n{history}"] if history else []
        expected += [
            f"# Current Turn:\n\n{turn(k)}",
            f"**World Model Output (Simulated):**\n```\nStored note {k}.\n```",
            f"**Ground Truth (Real Output):**\n```\n{NO_REFERENCE}\n```",
            CLOSING,
        ]
        assert messages[1]["content"] == "\n\n".join(expected), k
        assert messages[1]["content"].count("### Turn ") == k


def test_a_rubric_without_the_slot_still_gets_the_world_reference_the_message_names(tmp_path: Path) -> None:
    """The official rubrics have no `{world_reference}` slot: the reference is then the system prompt's last
    section, so "the world reference in your instructions" is there (before, it was dropped)."""
    world_path, trajectory = record_five_calls(tmp_path)
    official = tmp_path / "prompts" / "mcp"
    official.mkdir(parents=True)
    (official / "judge_system_prompt.txt").write_text("# Role and Objective\n\nGrade it.\n", encoding="utf-8")
    (official / "system_prompt.txt").write_text(
        "# Role and Objective\n\n{tool_definitions}\n", encoding="utf-8"
    )
    judge = run_judge(trajectory, world_path, "--prompts", str(tmp_path / "prompts"))
    system = judge.requests[0].body["messages"][0]["content"]
    assert system.startswith("# Role and Objective\n\nGrade it.\n\n---\n\n# World Reference\n\n")
    assert "Notes are numbered from 1." in system and '"name": "add_note"' in system
    assert "world reference in your instructions" in judge.requests[0].body["messages"][1]["content"]


class FlakyJudge:
    """A judge backend whose calls fail, or answer without scores, as scripted; the good answer after that."""

    def __init__(self, script: list[str]):
        self.script = list(script)
        self.calls = 0

    async def generate(self, messages: list[ChatMessage], params: GenerationParams, *args: Any) -> Generation:
        self.calls += 1
        step = self.script.pop(0) if self.script else "good"
        if step == "error":
            raise BackendError("judge server unreachable")
        return Generation(text="no scores here" if step == "unparsable" else GOOD)

    async def aclose(self) -> None:
        return None


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("script", "calls", "waits", "judged"),
    [
        (["error", "error"], 3, [JUDGE_RETRY_DELAY_S] * 2, True),  # recovers on the third try
        (["error", "error", "error"], 3, [JUDGE_RETRY_DELAY_S] * 2, False),  # 3 tries in all, then failed
        (["unparsable", "error"], 3, [JUDGE_RETRY_DELAY_S], True),  # no scores: asked again at once
        (["unparsable"] * 3, 3, [], False),
    ],
)
async def test_judge_backend_errors_are_retried_as_eval_py_does(
    script: list[str], calls: int, waits: list[float], judged: bool
) -> None:
    """eval.py: up to 3 judge calls per sample (`--max-retries 3`), 2 s after a failed one (its time.sleep(2)),
    none after an answer it could not parse. The wait is injected: nothing sleeps for real."""
    judge = FlakyJudge(script)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    judgement, raw = await judge_one(judge, "SYSTEM", "USER", sleep=sleep)  # type: ignore[arg-type]
    assert JUDGE_ATTEMPTS == 3 and judge.calls == calls and slept == waits
    assert (judgement is not None) == judged
    if judgement is None:
        assert raw in ("no scores here", "judge failed: judge server unreachable")


# --- the bench against eval.py ---------------------------------------------------------------------------------

# Predictions in eval.py's predictions.jsonl format (the sample's fields and the world model's reply content as
# `gen`), degenerate answers included.
PREDICTIONS = [
    ("mcp", "m1", '<think>ok</think>\n**Environment Observation:**\n{"id": 1}'),
    ("mcp", "m2", "<think>the model never closed its thinking"),  # -> No output
    ("mcp", "m3", "   \n  "),  # whitespace -> No output
    ("mcp", "m4", ""),  # no content at all: not judged, failed
    ("mcp", "m5", "<predicted_observation></predicted_observation>"),  # empty tags -> an empty answer
    ("mcp", "m6", "**Environment Observation:**"),  # a bare marker -> an empty answer
    ("mcp", "m7", "**Environment Observation:**\nPARTIAL"),  # the judge leaves one dimension invalid
    ("search", "s1", "**Environment Observation:**\n```\n[1] https://a.example\nTitle: A\n```"),
    ("search", "s2", "**Environment Observation:**\n\n"),  # a bare marker and blank lines
    ("search", "s3", "**Environment Observation:**\nZERO"),  # the judge's scores are all invalid
    ("web", "w1", "<predicted_observation>\nRootWebArea 'Cart'\n</predicted_observation>"),
    ("web", "w2", "<think>unclosed <predicted_observation>x</predicted_observation>"),
    ("web", "w3", "<think>only thinking</think>"),  # -> No output
]


def predictions_file(tmp_path: Path) -> Path:
    lines = [sample_line(key, domain, gen=gen) for domain, key, gen in PREDICTIONS]
    return write_lines(tmp_path / "predictions.jsonl", lines)


def judge_answer(user: str) -> str:
    """The judge's reply to a judge message, by the answer it shows (the same rule for eval.py and for us)."""
    shown = re.search(r"\*\*World Model Output \(Simulated\):\*\*\n```\n(.*?)\n```\n\n\*\*Ground", user, re.S)
    assert shown is not None
    output = shown.group(1)
    if output == "No output":
        scores: dict[str, Any] = dict.fromkeys(SCORES, 1)
    elif output == "":
        scores = {**dict.fromkeys(SCORES, 1), "format": 2}
    elif output == "ZERO":
        scores = {}
    elif output == "PARTIAL":
        scores = {**SCORES, "factuality": "n/a"}
    else:
        scores = SCORES
    return f"<final_evaluation>\n```json\n{json.dumps({'scores': scores})}\n```\n</final_evaluation>"


# What eval.py printed for PREDICTIONS judged by `judge_answer` (its `judge` step with a client answering
# `judge_answer`, then `score`; run on eval/eval.py of QwenLM/Qwen-AgentWorld at cd0aa83, 2026-12-01):
# domain -> (valid, total, format, factuality, consistency, realism, quality, total_score), on the 0-100 scale.
EVAL_PY_TABLE = {
    "MCP": (6, 7, 41.67, 15.00, 25.00, 16.67, 25.00, 26.67),
    "Search": (3, 3, 62.50, 37.50, 37.50, 25.00, 37.50, 40.00),
    "Web": (3, 3, 66.67, 50.00, 50.00, 33.33, 50.00, 50.00),
}
EVAL_PY_OVERALL = (11, 35.45)  # samples with a valid total score, and the overall score


def test_bench_scores_degenerate_answers_as_eval_py_and_prints_its_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Degenerate answers are judged (as `No output`, or as the empty text they leave) and their low scores
    count, as in eval.py; an empty reply is not judged and counts as failed. Before, every degenerate answer was
    left out of the table, which then read higher than eval.py's."""
    data = predictions_file(tmp_path)
    with ScriptedOpenAIServer(
        lambda body, n: Reply(content=judge_answer(body["messages"][1]["content"]))
    ) as j:
        argv = ["bench", str(data), "--judge-base-url", j.base_url, "--judge-model", "j"]
        assert main(argv) == 0
    assert len(j.requests) == len(PREDICTIONS) - 1  # m4 had no content: eval.py does not judge it either
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.split()}
    for name, (valid, total, *scores) in EVAL_PY_TABLE.items():
        assert rows[name][1] == f"{valid}/{total}", name
        assert [float(cell) for cell in rows[name][3:]] == scores, name
    # Degenerate answers, judged and counted (m4, with no content at all, is a failure, not an answer).
    assert rows["MCP"][2] == "4" and rows["Search"][2] == "1" and rows["Web"][2] == "1"
    assert rows["Overall"][1:] == [str(EVAL_PY_OVERALL[0]), f"{EVAL_PY_OVERALL[1]:.2f}"]
    results = [json.loads(line) for line in data.with_suffix(".results.jsonl").read_text().splitlines()]
    outputs = {r["id"]: r["output"] for r in results}
    assert outputs["m2"] == outputs["m3"] == outputs["w3"] == "No output" and outputs["m4"] is None
    assert outputs["m5"] == outputs["m6"] == outputs["s2"] == ""
