"""Rendering the world-model conversation and parsing nasty answers."""

from __future__ import annotations

import pytest

from aw_mcp.prompting import (
    SYSTEM_SLOTS,
    Turn,
    build_messages,
    fill_slots,
    load_template,
    parse_answer,
    parse_json_observation,
    render_action,
    render_system_prompt,
    strip_code_fence,
)
from aw_mcp.world import load_world_text
from tests.conftest import SMALL_WORLD

DOMAINS = ["mcp", "search", "terminal", "swe", "android", "web", "os"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_domain_prompt_has_every_slot(domain: str) -> None:
    template = load_template(domain)
    for slot in SYSTEM_SLOTS:
        assert "{" + slot + "}" in template, f"prompts/{domain}/system_prompt.txt lacks {{{slot}}}"
    judge = load_template(domain, "judge_system_prompt")
    for dimension in ("format", "factuality", "consistency", "realism", "quality"):
        assert dimension in judge.lower()


def test_fill_slots_leaves_other_braces_alone() -> None:
    out = fill_slots('{"a": {now}} {unknown} {facts}', {"now": "T", "facts": "F"})
    assert out == '{"a": T} {unknown} F'


def test_system_prompt_carries_tools_examples_facts_state_clock() -> None:
    world = load_world_text(SMALL_WORLD)
    text = render_system_prompt(world, "2026-03-01T09:00:00+00:00")
    assert '"name": "get_order"' in text and '"outputSchema"' in text
    assert "ORD-1001" in text  # the example and the state table
    assert "Orders ship from Rotterdam." in text and "(applies to: get_order)" in text
    assert "2026-03-01T09:00:00+00:00" in text
    assert "{tool_definitions}" not in text and "{facts}" not in text


def test_conversation_shape_alternates_actions_and_observations() -> None:
    world = load_world_text(SMALL_WORLD)
    history = [Turn("get_order", {"order_id": "ORD-1"}, '{"id": "ORD-1", "status": "pending"}')]
    messages = build_messages(
        world, "SYS", history, "cancel_order", {"order_id": "ORD-1"}, notes=["be terse"]
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == (
        '### Turn 1\n\n**Action:**\n```json\n{"name": "get_order", "arguments": {"order_id": "ORD-1"}}\n```'
    )
    assert messages[2]["content"].startswith("**Environment Observation:**\n{")
    assert messages[3]["content"].startswith("### Turn 2") and "- be terse" in messages[3]["content"]


def test_terminal_action_is_keystroke_array_with_current_screen_first() -> None:
    world = load_world_text("name: t\ndomain: terminal\nstate: 'user@box:~$ '\n")
    assert render_action(world, "send_keys", {"keystrokes": "ls\n", "duration": 0.5}) == (
        '```json\n[{"keystrokes": "ls\\n", "duration": 0.5}]\n```'
    )
    messages = build_messages(world, "SYS", [], "send_keys", {"keystrokes": "ls\n"})
    user = messages[-1]["content"]
    assert user.index("**Current Screen:**\nuser@box:~$") < user.index("**Action:**")


def test_gui_actions_render_as_calls_and_code() -> None:
    android = load_world_text("name: a\ndomain: android\n")
    assert (
        render_action(android, "android_action", {"action": "tap", "element": 4})
        == "```\ntap(element=4)\n```"
    )
    desktop = load_world_text("name: o\ndomain: os\n")
    assert render_action(desktop, "run_gui_code", {"code": "pyautogui.click(1, 2)"}).startswith("```python\n")


@pytest.mark.parametrize(
    ("answer", "observation", "thinking"),
    [
        ("<think>plan</think>\n**Environment Observation:**\nfile.txt", "file.txt", "plan"),
        (
            "plan only</think>\n\n**Environment Observation:**\nok",
            "ok",
            "plan only",
        ),  # template opened <think>
        ("<think>a</think><think>b</think>**Environment Observation:** x", "x", "a\n\nb"),
        (
            "<THINK>loud</THINK>\n<predicted_observation>\n<tree/>\n</predicted_observation>",
            "<tree/>",
            "loud",
        ),
        ("<think>never closed and no answer", "", "never closed and no answer"),
        ("<think>unclosed\n**Environment Observation:**\nstill here", "still here", "unclosed"),
        ("<predicted_observation>cut off mid", "cut off mid", ""),
        ('**Environment Observation:**\n```json\n{"a": 1}\n```', '{"a": 1}', ""),
        ("Environment Observation: plain marker", "plain marker", ""),
        ("**Environment Observation**: colon outside", "colon outside", ""),
        ("no markers at all", "no markers at all", ""),
        ("", "", ""),
        ("**Environment Observation:**\nfirst\n**Environment Observation:**\nsecond", "second", ""),
        ("</think></think>**Environment Observation:**y", "y", ""),
    ],
)
def test_parse_answer_survives_nasty_inputs(answer: str, observation: str, thinking: str) -> None:
    parsed = parse_answer(answer)
    assert parsed.observation == observation
    assert parsed.thinking == thinking


def test_reasoning_content_from_the_server_is_kept() -> None:
    parsed = parse_answer("**Environment Observation:**\nok", reasoning="server-split thinking")
    assert parsed == parse_answer("ok", reasoning="server-split thinking")
    assert parsed.thinking == "server-split thinking"


def test_code_fences_and_json_extraction() -> None:
    assert strip_code_fence("```\nscreen\n```") == "screen"
    assert strip_code_fence("text ```not a fence``` more") == "text ```not a fence``` more"
    assert parse_json_observation('```json\n{"a": [1, 2]}\n```') == {"a": [1, 2]}
    assert parse_json_observation('Here is the result: {"ok": true} hope that helps') == {"ok": True}
    assert parse_json_observation("[1, 2]") == [1, 2]
    with pytest.raises(ValueError):
        parse_json_observation("{not json")
