"""Golden conversations: for each domain's bundled world and a fixed three-call session, the exact messages sent to
the world model (system prompt, every user and assistant turn) are kept in tests/golden/<domain>.json, reviewed
against the trained format (shared docs: trained-format.md). Any byte of drift fails.

After an intended change of the prompt format, regenerate with `AW_REGENERATE_GOLDEN=1 python -m pytest
tests/prompt/test_golden.py`, then review the diff of tests/golden/ before committing it (the switch is off by default,
and a regenerating run still fails so it is never mistaken for a passing one).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from aw_mcp.load.world import load_world
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec.bundled import worlds_dir
from tests.conftest import ScriptedWorldModel

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("AW_REGENERATE_GOLDEN") == "1"


def answer(text: str) -> str:
    return f"<think>\nWork out the next state.\n</think>\n\n**Environment Observation:**\n{text}"


def tagged(text: str) -> str:
    return f"Reasoning about the action.\n<predicted_observation>\n{text}\n</predicted_observation>"


# domain -> (bundled world, three (tool, arguments) calls, the model's three answers)
SESSIONS: dict[str, tuple[str, list[tuple[str, dict[str, Any]]], list[str]]] = {
    "mcp": (
        "mcp_crm",
        [
            ("list_deals", {"stage": "negotiation"}),
            ("update_deal_stage", {"deal_id": "deal_20871", "stage": "closed_won", "note": "Signed today"}),
            ("log_activity", {"contact_id": "con_104213", "type": "call", "subject": "Kick-off"}),
        ],
        [
            answer('{\n  "deals": [\n    {"id": "deal_20871", "stage": "negotiation"}\n  ]\n}'),
            answer('{"id": "deal_20871", "stage": "closed_won", "updated_at": "2026-03-04T14:21:07Z"}'),
            answer('{"id": "act_0009917", "type": "call", "subject": "Kick-off"}'),
        ],
    ),
    "search": (
        "search_python_release",
        [
            ("web_search", {"queries": ["python 3.14 release date"]}),
            ("web_extractor", {"url": "https://www.python.org/downloads/release/python-3140/"}),
            ("web_search", {"queries": ["PEP 779 free-threaded"]}),
        ],
        [
            answer(
                "```\n[1] https://www.python.org/downloads/release/python-3140/\nTitle: Python Release Python 3.14.0"
                "\nSnippet: Python 3.14.0 is the newest major release ...\nDate: Oct 7, 2025\n\n"
                "[2] https://docs.python.org/3/whatsnew/3.14.html\nTitle: What's new in Python 3.14\n"
                "Snippet: This article explains the new features in Python 3.14 ...\nDate: N/A\n```"
            ),
            answer(
                "# Python Release Python 3.14.0\n\n**Release Date:** Oct. 7, 2025\n\nThis is the stable release."
            ),
            answer(
                "[1] https://peps.python.org/pep-0779/\nTitle: PEP 779 - Criteria for supported status\n"
                "Snippet: ... phase II ...\nDate: N/A"
            ),
        ],
    ),
    "terminal": (
        "terminal_devbox",
        [
            ("send_keys", {"keystrokes": "git status --short\n", "duration": 0.5}),
            ("send_keys", {"keystrokes": "", "duration": 2}),
            ("send_keys", {"keystrokes": "C-c"}),
        ],
        [
            answer(
                "dana@devbox:~/src/ledger-api (feature/idempotency-keys *)$ git status --short\n"
                " M app/routes/payments.py\n M tests/test_payments.py\n?? scratch.http\n"
                "dana@devbox:~/src/ledger-api (feature/idempotency-keys *)$ "
            ),
            answer("dana@devbox:~/src/ledger-api (feature/idempotency-keys *)$ "),
            answer("dana@devbox:~/src/ledger-api (feature/idempotency-keys *)$ ^C\n"),
        ],
    ),
    "swe": (
        "swe_bugfix",
        [
            ("read_file", {"path": "/testbed/src/durparse/format.py", "offset": 17, "limit": 3}),
            ("run_shell_command", {"command": "git status --short", "directory": "."}),
            ("run_shell_command", {"command": "python -m pytest -q tests/test_format.py"}),
        ],
        [
            answer(
                "[File content truncated: showing lines 18-20 of 31 total lines...]\n"
                "    for suffix, size in _UNITS:\n        if total > size and len(parts) < max_units:\n"
                "            count, total = divmod(total, size)"
            ),
            answer(
                "Command: git status --short\nDirectory: .\nStdout:  M src/durparse/format.py\nStderr: (empty)\n"
                "Error: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: (none)"
            ),
            answer(
                "Command: python -m pytest -q tests/test_format.py\nDirectory: (root)\nStdout: ......F\n"
                "1 failed, 6 passed in 0.04s\nStderr: (empty)\nError: (none)\nExit Code: 1\nSignal: (none)\n"
                "Background PIDs: (none)"
            ),
        ],
    ),
    "android": (
        "android_phone",
        [
            ("click", {"index": 18}),
            ("click", {"index": 3}),
            ("input_text", {"text": "Yes, see you Sunday!", "index": 7}),
        ],
        [
            tagged(
                '[ 0] | android.widget.FrameLayout | res="com.google.android.apps.messaging:id/root" | '
                "bounds=[0,0][1080,2400]\n"
                '[ 1] | android.widget.TextView | text="Messages" | bounds=[48,150][420,230]\n'
                '[ 3] | android.view.ViewGroup | desc="Mum, Are you still coming for lunch on Sunday?" | '
                "bounds=[0,420][1080,600] | clickable"
            ),
            tagged(
                '[ 0] | android.widget.FrameLayout | res="com.google.android.apps.messaging:id/root" | '
                "bounds=[0,0][1080,2400]\n"
                '[ 7] | android.widget.EditText | res="com.google.android.apps.messaging:id/compose_message_text" | '
                'text="Text message" | bounds=[150,2200][880,2330] | clickable | focusable'
            ),
            tagged(
                "[ 0] | android.widget.FrameLayout | bounds=[0,0][1080,2400]\n"
                '[ 7] | android.widget.EditText | text="Yes, see you Sunday!" | bounds=[150,2200][880,2330] | '
                "clickable | focused"
            ),
        ],
    ),
    "web": (
        "web_shop",
        [
            ("click", {"bid": "a25"}),
            ("fill", {"bid": "a1", "value": "tent"}),
            ("keyboard_press", {"key": "Enter"}),
        ],
        [
            tagged(
                "URL: https://www.fernhilloutdoor.com/\nRootWebArea 'Fernhill Outdoor' focused\n  [a1] searchbox"
            ),
            tagged(
                "URL: https://www.fernhilloutdoor.com/\nRootWebArea 'Fernhill Outdoor'\n  [a1] searchbox 'tent' focused"
            ),
            # An unclosed tag at the end of the answer (the model ran out of tokens) still yields the page.
            "<predicted_observation>\nURL: https://www.fernhilloutdoor.com/search?q=tent\nRootWebArea 'Search'",
        ],
    ),
    "os": (
        "os_desktop",
        [
            ("run_gui_code", {"code": "import pyautogui\npyautogui.click(530, 442)"}),
            ("run_gui_code", {"code": "pyautogui.write('Total')\npyautogui.press('tab')"}),
            ("run_gui_code", {"code": "pyautogui.write('=SUM(E2:E13)\\n')"}),
        ],
        [
            tagged('table-cell "D14" text="" (480,442 200x20) selected'),
            tagged('table-cell "D14" text="Total" (480,442 200x20)\ntable-cell "E14" selected'),
            tagged('table-cell "E14" text="1847.35" (680,442 110x20)'),
        ],
    ),
}


async def session_messages(domain: str) -> dict[str, Any]:
    world_name, calls, answers = SESSIONS[domain]
    world = load_world(worlds_dir() / f"{world_name}.yaml")
    model = ScriptedWorldModel(list(answers))
    simulator = Simulator(world, model)
    for tool, arguments in calls:
        outcome = await simulator.call(tool, arguments)
        assert not outcome.is_error, outcome.text
    requests = [call["messages"] for call in model.calls]
    systems = {messages[0]["content"] for messages in requests}
    assert len(systems) == 1 and all(m[0]["role"] == "system" for m in requests)
    return {
        "world": f"worlds/{world_name}.yaml",
        "system": systems.pop(),
        "requests": [messages[1:] for messages in requests],
    }


@pytest.mark.anyio
@pytest.mark.parametrize("domain", list(SESSIONS))
async def test_messages_sent_to_the_model_match_the_reviewed_fixture(domain: str) -> None:
    actual = await session_messages(domain)
    path = GOLDEN / f"{domain}.json"
    text = json.dumps(actual, ensure_ascii=False, indent=1) + "\n"
    if REGENERATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        pytest.fail(f"regenerated {path}: review its diff, then run again without AW_REGENERATE_GOLDEN")
    assert path.exists(), f"{path} is missing: run with AW_REGENERATE_GOLDEN=1 and review it"
    expected = path.read_text(encoding="utf-8")
    if text != expected:  # compare the parsed form first for a readable diff, then the bytes
        assert actual == json.loads(expected)
        assert text == expected


@pytest.mark.parametrize("domain", list(SESSIONS))
def test_fixture_follows_the_trained_layout(domain: str) -> None:
    """What a reviewer checks by eye, checked on the stored fixture itself (so a regenerated fixture that broke the
    trained format cannot pass unnoticed)."""
    golden = json.loads((GOLDEN / f"{domain}.json").read_text(encoding="utf-8"))
    assert golden["system"].startswith("# Role and Objective\n\nYou are ")
    third = golden["requests"][2]
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    for number, user in enumerate(third[0::2], 1):
        assert user["content"].startswith(f"### Turn {number}\n**")  # no blank line after the header
        # Android, web and OS: the then-current screen in every turn; terminal: on turn 1 only.
        assert ("**Current State:**" in user["content"]) == (
            domain in {"android", "web", "os"} or (number == 1 and domain == "terminal")
        )
        assert ("**Task Instruction:**" in user["content"]) == (
            number == 1 and domain in {"android", "web", "os"}
        )
    for assistant in third[1::2]:
        assert assistant["content"].startswith("**Environment Observation:**\n")
    if domain in {"mcp", "search", "swe"}:
        assert '```json\n{\n  "name": ' in third[0]["content"]
    if domain == "terminal":
        assert third[0]["content"].startswith("### Turn 1\n**Current State:**\ndana@devbox:~/src/ledger-api")
        assert '```json\n[\n  {\n    "keystrokes": ' in third[0]["content"]
        assert "cwd:" not in json.dumps(third)  # the hidden state never reaches the turns
    if domain == "web":
        assert "```\nfill('a1', 'tent')\n```" in third[2]["content"]
    if domain in {"android", "web", "os"}:  # turn k shows the observation that answered turn k-1
        for k in (1, 2):
            screen = third[2 * k - 1]["content"].removeprefix("**Environment Observation:**\n")
            assert f"**Current State:**\n{screen}\n\n**Action:**" in third[2 * k]["content"]
    if domain == "android":
        assert third[0]["content"].startswith(
            "### Turn 1\n**Task Instruction:**\nReply to Mum's message: tell her you are coming for lunch on "
            "Sunday.\n\n**Current State:**\n[ 0] | android.widget.FrameLayout | "
        )
        assert third[0]["content"].endswith(
            '**Action:**\n```json\n{"action_type": "click", "index": 18}\n```'
        )
        assert third[4]["content"].endswith(
            '```json\n{"action_type": "input_text", "text": "Yes, see you Sunday!", "index": 7}\n```'
        )
    if domain == "swe":  # the state's files and tree arrive line for line: literal blocks, no escapes
        assert "\\n" not in golden["system"] and "\n\n  ├──" not in golden["system"]
    if domain == "os":
        assert third[0]["content"].startswith("### Turn 1\n**Task Instruction:**\nAdd a total row")
    if domain == "swe":  # the file's lines kept exactly, their indentation included
        assert third[1]["content"] == (
            "**Environment Observation:**\n[File content truncated: showing lines 18-20 of 31 total lines...]\n"
            "    for suffix, size in _UNITS:\n        if total > size and len(parts) < max_units:\n"
            "            count, total = divmod(total, size)"
        )
        assert '"name": "run_shell_command"' in golden["system"]  # the official SWE prompt's shell tool
    if domain == "search":
        assert third[1]["content"].startswith("**Environment Observation:**\n```\n[1] https://")
