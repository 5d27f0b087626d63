"""The one answer parser (aw_mcp/prompt/parse.py) and the frame it reads (aw_mcp/prompt/frame.py): its two dialects
side by side, the judge's reply, and JSON in prose strict and forgiving. The lenient dialect's cases are in
test_prompting.py, the eval.py dialect's byte-exact ones in test_judge_bench.py."""

from __future__ import annotations

import pytest

from aw_mcp.prompt import parse
from aw_mcp.prompt.constraint import answer_frame
from aw_mcp.prompt.frame import ANSWER_CLOSE, ANSWER_OPEN, OBSERVATION_MARKER, observation_frame
from aw_mcp.prompt.parse import (
    EVAL_PY,
    LENIENT,
    json_candidates,
    json_object,
    parse_answer,
    parse_json_observation,
    split_thinking,
    without_thinking,
)
from aw_mcp.spec.domains import DOMAINS, TAGGED_DOMAINS


def test_the_frame_is_read_where_it_is_written() -> None:
    for domain in DOMAINS:
        prefix, suffix = answer_frame(domain)
        assert (prefix, suffix) == observation_frame(domain in TAGGED_DOMAINS)
        framed = parse_answer(f"{prefix}42{suffix}")
        assert framed.observation == "42" and framed.framed
    assert observation_frame(True) == (f"{ANSWER_OPEN}\n", f"\n{ANSWER_CLOSE}")
    assert parse._MARKER.fullmatch(OBSERVATION_MARKER)


@pytest.mark.parametrize(
    ("text", "lenient", "eval_py"),
    [
        # An unclosed think: ours keeps the answer written after a marker; eval.py cuts to the answer tag only.
        ("<think>unclosed\n**Environment Observation:**\nstill here", "still here", ""),
        # ours unwraps the fence and drops the marker; eval.py hands both on as they are.
        (f"{OBSERVATION_MARKER}\n```json\n{{}}\n```", "{}", f"{OBSERVATION_MARKER}\n```json\n{{}}\n```"),
        (f"{ANSWER_OPEN}\n```\nx\n```\n{ANSWER_CLOSE}", "x", "```\nx\n```"),
        ("<think>a<think>b</think>c</think>rest", "rest", "rest"),
        ("plan</think>\n\n<predicted_observation>\nok", "ok", "ok"),
    ],
)
def test_the_two_dialects_side_by_side(text: str, lenient: str, eval_py: str) -> None:
    assert parse_answer(text).observation == lenient
    assert parse_answer(text, dialect=LENIENT) == parse_answer(text)
    assert parse_answer(text, dialect=EVAL_PY).observation == eval_py


def test_thinking_is_reported_in_both_dialects() -> None:
    text = "<think>plan</think>\n**Environment Observation:**\nok"
    assert split_thinking(text) == ("\n**Environment Observation:**\nok", "plan")
    assert split_thinking(text, EVAL_PY) == ("**Environment Observation:**\nok", "plan")
    assert parse_answer(text, "server", dialect=EVAL_PY).thinking == "server\n\nplan"


def test_framed_says_whether_the_answer_had_its_frame_and_is_not_part_of_equality() -> None:
    assert not parse_answer("just text").framed and not parse_answer("x", dialect=EVAL_PY).framed
    assert parse_answer(f"{ANSWER_OPEN}{ANSWER_CLOSE}", dialect=EVAL_PY).framed
    assert parse_answer(f"{OBSERVATION_MARKER}\nok") == parse_answer("ok")


@pytest.mark.parametrize(
    ("reply", "kept"),
    [
        ('plan</think>{"scores": {}}', '{"scores": {}}'),  # the template opened the block
        ("<think>draft</think>final", "final"),
        ("<think>a</think>b</think>c", "b</think>c"),  # a <think> before the last </think>: no template cut
        ("<think>truncated <predicted_observation>x", ""),  # an unclosed block runs to the end
    ],
)
def test_the_judge_reply_loses_its_thinking(reply: str, kept: str) -> None:
    assert without_thinking(reply) == kept


def test_json_in_prose_strict_for_observations_forgiving_for_the_judge() -> None:
    assert parse_json_observation('Here it is: {"a": [1, 2]} done') == {"a": [1, 2]}
    with pytest.raises(ValueError):
        parse_json_observation("{'a': 1,}")  # an observation is never repaired
    assert json_object("{'a': 1,}") == {"a": 1}
    assert json_object("{'a': 1,}", repair=False) is None
    assert json_object("[1]") is None
    prose = 'x ```json\n{"a": 1}\n``` then {"b": {"c": "}"}} and {'
    assert json_candidates(prose) == ['{"a": 1}', '{"a": 1}', '{"b": {"c": "}"}}']
