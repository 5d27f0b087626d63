"""Rendering the world-model conversation and parsing nasty answers."""

from __future__ import annotations

import pytest

from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.parse import parse_answer, parse_json_observation, strip_code_fence
from aw_mcp.prompt.render import (
    SYSTEM_SLOTS,
    Turn,
    fill_slots,
    load_template,
    render_action,
    render_system_prompt,
)
from aw_mcp.prompt.transcript import build_messages
from aw_mcp.spec.domains import ROLE_PHRASES, TAGGED_DOMAINS, TRAINED_SECTIONS
from aw_mcp.spec.issues import WorldSpecError
from tests.conftest import SMALL_WORLD

DOMAINS = ["mcp", "search", "terminal", "swe", "android", "web", "os"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_domain_prompt_has_the_trained_structure_and_every_slot(domain: str) -> None:
    template = load_template(domain)
    assert template.startswith("# Role and Objective\n\n" + ROLE_PHRASES[domain])
    headers = [line[2:] for line in template.splitlines() if line.startswith("# ")]
    trained = [h for h in headers if h in TRAINED_SECTIONS[domain]]
    assert trained == list(TRAINED_SECTIONS[domain]), f"{domain}: trained sections out of order: {headers}"
    assert headers[: len(trained)] == trained, (
        f"{domain}: our own top-level sections must follow the trained ones"
    )
    for slot in SYSTEM_SLOTS:
        assert "{" + slot + "}" in template, f"prompts/{domain}/system_prompt.txt lacks {{{slot}}}"
    assert "<think>" not in template  # no trained prompt asks for the think tags
    if domain in TAGGED_DOMAINS:
        assert "<predicted_observation></predicted_observation>" in template
    else:
        assert "**Environment Observation:**" in template
    judge = load_template(domain, "judge_system_prompt")
    assert judge.startswith("# Role and Objective") and "<final_evaluation>" in judge
    for dimension in ("format", "factuality", "consistency", "realism", "quality"):
        assert f'"{dimension}"' in judge


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
    assert '## Example 1\n### Turn 1\n**Action:**\n```json\n{\n  "name": "get_order"' in text


def test_declared_errors_reach_the_model_not_the_agent() -> None:
    """The mcp prompt tells the model to fail with "the named error the tool declares (its `errors`)": the tool
    definitions it reads must carry them; the MCP tool list has no such field."""
    world = load_world_text(SMALL_WORLD)  # cancel_order declares already_shipped
    text = render_system_prompt(world, "2026-03-01T09:00:00+00:00")
    assert '"errors": [\n      {\n        "name": "already_shipped",' in text
    assert "errors" not in world.tool("cancel_order").wire()


def test_conversation_shape_alternates_actions_and_observations() -> None:
    world = load_world_text(SMALL_WORLD)
    history = [Turn("get_order", {"order_id": "ORD-1"}, '{"id": "ORD-1", "status": "pending"}')]
    messages = build_messages(
        world, "SYS", history, "cancel_order", {"order_id": "ORD-1"}, notes=["be terse"]
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == (
        '### Turn 1\n**Action:**\n```json\n{\n  "name": "get_order",\n  "arguments": {\n    "order_id": "ORD-1"\n  }\n}\n```'
    )
    assert messages[2]["content"].startswith("**Environment Observation:**\n{")
    assert (
        messages[3]["content"].startswith("### Turn 2\n**Action:**")
        and "- be terse" in messages[3]["content"]
    )


TERMINAL = "name: t\ndomain: terminal\nstate: {host: box}\nscreen: |\n  user@box:~$ \n"


def test_terminal_turn_one_is_current_state_then_keystroke_list() -> None:
    world = load_world_text(TERMINAL)
    assert render_action(world, "send_keys", {"keystrokes": "ls\n", "duration": 0.5}) == (
        '```json\n[\n  {\n    "keystrokes": "ls\\n",\n    "duration": 0.5\n  }\n]\n```'
    )
    messages = build_messages(world, "SYS", [], "send_keys", {"keystrokes": "ls\n"})
    assert messages[-1]["content"].startswith("### Turn 1\n**Current State:**\nuser@box:~$ \n\n**Action:**\n")
    later = build_messages(
        world, "SYS", [Turn("send_keys", {"keystrokes": "ls\n"}, "screen")], "send_keys", {}
    )
    assert "**Current State:**" not in later[-1]["content"] and later[-1]["content"].startswith(
        "### Turn 2\n**Action:**"
    )
    assert "host: box" not in "".join(m["content"] for m in messages[1:])


def test_screen_world_without_screen_is_a_spec_error_at_its_line() -> None:
    with pytest.raises(WorldSpecError) as info:
        load_world_text("name: t\ndomain: terminal\nstate:\n  screen: |\n    $\n", "w.yaml")
    message = str(info.value)
    assert message.startswith("w.yaml:2: domain: a `terminal` world needs its initial screen under `screen:`")
    assert "move `state.screen` to a top-level `screen:`" in message
    with pytest.raises(
        WorldSpecError, match=r"w.yaml:2: screen: `screen:` is read only by the screen domains"
    ):
        load_world_text("name: t\nscreen: x\ntools: [{name: a}]\n", "w.yaml")
    with pytest.raises(WorldSpecError, match=r"w.yaml:3: task: .* only by the android, os, web domains"):
        load_world_text("name: t\ndomain: terminal\ntask: buy\nscreen: x\n", "w.yaml")
    for domain in ("android", "web", "os"):  # the screen domains with a Task Instruction take one
        assert load_world_text(f"name: t\ndomain: {domain}\ntask: buy\nscreen: x\n").task == "buy"


def test_os_turn_one_carries_the_task_instruction() -> None:
    world = load_world_text("name: o\ndomain: os\nscreen: tree\ntask: Save the file.\n")
    user = build_messages(world, "SYS", [], "run_gui_code", {"code": "pyautogui.click(1, 2)"})[-1]["content"]
    assert user == (
        "### Turn 1\n**Task Instruction:**\nSave the file.\n\n**Current State:**\ntree\n\n"
        "**Action:**\n```python\npyautogui.click(1, 2)\n```"
    )


def test_gui_actions_render_as_calls_and_code() -> None:
    android = load_world_text("name: a\ndomain: android\nscreen: s\n")
    assert (
        render_action(android, "click", {"index": 4}) == '```json\n{"action_type": "click", "index": 4}\n```'
    )
    desktop = load_world_text("name: o\ndomain: os\nscreen: s\n")
    assert render_action(desktop, "run_gui_code", {"code": "pyautogui.click(1, 2)"}).startswith("```python\n")


@pytest.mark.parametrize(
    ("tool", "arguments", "call"),
    [
        ("fill", {"bid": "a12", "value": "tent"}, "fill('a12', 'tent')"),
        ("click", {"bid": "a12"}, "click('a12')"),
        (
            "click",
            {"bid": "a12", "button": "right", "modifiers": ["Shift"]},
            "click('a12', button='right', modifiers=['Shift'])",
        ),
        ("click", {"bid": "a12", "button": "left"}, "click('a12')"),
        ("scroll", {"delta_x": 0, "delta_y": 300}, "scroll(0, 300)"),
        (
            "select_option",
            {"bid": "b7", "options": ["Moss", "Slate"]},
            "select_option('b7', ['Moss', 'Slate'])",
        ),
        ("keyboard_press", {"key": "Enter"}, "keyboard_press('Enter')"),
        ("goto", {"url": "https://x.test/a?b='c'"}, "goto(\"https://x.test/a?b='c'\")"),
        ("go_back", {}, "go_back()"),
        ("noop", {"wait_ms": 500}, "noop(wait_ms=500)"),
        (
            "fill",
            {"bid": "a1", "value": "x", "enable_autocomplete_menu": True},
            "fill('a1', 'x', enable_autocomplete_menu=True)",
        ),
    ],
)
def test_web_actions_render_as_browsergym_calls(tool: str, arguments: dict, call: str) -> None:
    web = load_world_text("name: w\ndomain: web\nscreen: s\n")
    assert web.tool(tool).argument_problems(arguments) == []
    assert render_action(web, tool, arguments) == f"```\n{call}\n```"


def test_web_world_has_the_21_browsergym_tools() -> None:
    web = load_world_text("name: w\ndomain: web\nscreen: s\n")
    assert len(web.tools) == 21
    assert {t.name for t in web.tools} >= {
        "click",
        "fill",
        "goto",
        "scroll",
        "select_option",
        "mouse_dblclick",
    }
    assert web.tool("click").argument_problems({"bid": 5})  # bids are strings, never integer indices
    assert web.tool("fill").argument_problems({"bid": "a1"})  # value is required
    definitions = render_system_prompt(web, "T")
    assert "fill(bid: str, value: str, enable_autocomplete_menu: bool = False)" in definitions
    assert (
        "click(bid: str, button: Literal['left', 'middle', 'right'] = 'left', modifiers: list = [])"
        in definitions
    )


def test_search_results_go_back_into_history_in_their_fenced_block() -> None:
    world = load_world_text("name: s\ndomain: search\n")
    results = "[1] https://a.test/\nTitle: A\nSnippet: a\nDate: N/A"
    history = [
        Turn("web_search", {"queries": ["a"]}, results),
        Turn("web_extractor", {"url": "https://a.test/"}, "# A"),
    ]
    messages = build_messages(world, "SYS", history, "web_search", {"queries": ["b"]})
    assert messages[2]["content"] == f"**Environment Observation:**\n```\n{results}\n```"
    assert messages[4]["content"] == "**Environment Observation:**\n# A"


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
        ("<predicted_observation>draft</predicted_observation>\n<predicted_observation>final", "final", ""),
        (
            "**Environment Observation:**\n     1\tdef f():\n     2\t    pass\n",
            "     1\tdef f():\n     2\t    pass",
            "",
        ),
        ("**Environment Observation:**\n\n  \n$ ls\nroot@h:/app# ", "$ ls\nroot@h:/app# ", ""),
        ("**Environment Observation:**\n```\n     1\tx\n```", "     1\tx", ""),
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
