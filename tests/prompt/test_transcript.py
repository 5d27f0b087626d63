"""The transcript: which turns carry the screen and the task, turn numbers under compaction, verbatim state, and a
per-call cost that does not grow with the session."""

from __future__ import annotations

import pytest
import yaml

from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.render import Turn, messages_hash, render_state
from aw_mcp.prompt.transcript import Transcript

SCREEN_0 = "[ 0] | android.widget.FrameLayout | bounds=[0,0][1080,2400]"


def web_world():
    return load_world_text("name: w\ndomain: web\ntask: Buy a tent.\nscreen: |\n  page 0\n")


@pytest.mark.parametrize("domain", ["android", "web", "os"])
def test_screen_domains_carry_the_then_current_screen_in_every_turn(domain: str) -> None:
    world = load_world_text(f"name: s\ndomain: {domain}\ntask: Do it.\nscreen: |\n  screen 0\n")
    tool = world.tools[0].name
    transcript = Transcript(world, [Turn(tool, {}, "screen 1"), Turn(tool, {}, "screen 2")])
    users = [m["content"] for m in transcript.prompt("SYS", tool, {}).messages if m["role"] == "user"]
    assert users[0].startswith(
        "### Turn 1\n**Task Instruction:**\nDo it.\n\n**Current State:**\nscreen 0\n\n**Action:**"
    )
    assert users[1].startswith("### Turn 2\n**Current State:**\nscreen 1\n\n**Action:**")
    assert users[2].startswith("### Turn 3\n**Current State:**\nscreen 2\n\n**Action:**")
    assert all("**Task Instruction:**" not in u for u in users[1:])


def test_terminal_shows_the_screen_on_turn_one_only() -> None:
    world = load_world_text("name: t\ndomain: terminal\nscreen: |\n  $ \n")
    transcript = Transcript(world, [Turn("send_keys", {"keystrokes": "ls\n"}, "$ ls\na b\n$ ")])
    users = [
        m["content"] for m in transcript.prompt("SYS", "send_keys", {"keystrokes": "pwd\n"}).messages[1::2]
    ]
    assert users[0].startswith("### Turn 1\n**Current State:**\n$ \n\n**Action:**")
    assert users[1].startswith("### Turn 2\n**Action:**")


def test_compaction_keeps_turn_numbers_and_shows_the_current_page() -> None:
    """Issue 25: after dropping turns 1-10 of a 30-turn web session the next request numbers its turns 11-31 and
    shows the current page. Issue 31.5: the first kept turn is a mid-trajectory turn as the benchmark rows show one
    (its then-current page, no task again: the compaction note carries it), byte for byte as it was rendered."""
    world = web_world()
    transcript = Transcript(world, [Turn("go_back", {}, f"page {k}") for k in range(1, 31)])
    whole = transcript.prompt("SYS", "go_back", {}).messages
    messages = transcript.prompt("SYS", "go_back", {}, start=10).messages
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert [int(u.split("\n", 1)[0].removeprefix("### Turn ")) for u in users] == list(range(11, 32))
    assert users[0] == "### Turn 11\n**Current State:**\npage 10\n\n**Action:**\n```\ngo_back()\n```"
    assert messages[1:] == whole[21:]  # the kept turns exactly as the uncompacted prompt has them
    assert "Task Instruction" not in "".join(users)
    assert users[-1].startswith("### Turn 31\n**Current State:**\npage 30\n\n")
    assert "page 0" not in "".join(users)  # never the world's initial page as current
    assert messages[2]["content"] == "**Environment Observation:**\npage 11"


def test_everything_compacted_the_action_turn_opens_with_the_current_screen() -> None:
    world = web_world()
    transcript = Transcript(world, [Turn("go_back", {}, "page 1"), Turn("go_back", {}, "page 2")])
    messages = transcript.prompt("SYS", "go_back", {}, start=2).messages
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"].startswith("### Turn 3\n**Current State:**\npage 2\n")
    terminal = load_world_text("name: t\ndomain: terminal\nscreen: |\n  $ \n")
    shell = Transcript(terminal, [Turn("send_keys", {"keystrokes": "ls\n"}, "$ ls\na b\n$ ")])
    [_, current] = shell.prompt("SYS", "send_keys", {"keystrokes": "pwd\n"}, start=1).messages
    assert current["content"].startswith("### Turn 2\n**Current State:**\n$ ls\na b\n$ \n\n**Action:**")


def test_prompt_hash_is_the_hash_of_its_messages_and_earlier_turns_are_rendered_once() -> None:
    world = web_world()
    transcript = Transcript(world)
    for k in range(1, 6):
        transcript.append(Turn("go_back", {}, f"page {k}"))
    first = transcript.prompt("SYS", "go_back", {})
    assert first.hash == messages_hash(first.messages)
    compacted = transcript.prompt("SYS", "go_back", {}, start=2)
    assert compacted.hash == messages_hash(compacted.messages) != first.hash
    transcript.append(Turn("go_back", {}, "page 6"))
    later = transcript.prompt("SYS", "go_back", {})
    assert later.messages[1] is first.messages[1]  # the same kept turn, not a new rendering


def test_state_text_reaches_the_model_line_for_line() -> None:
    """Multi-line strings (a tree, a file with tabs and trailing spaces, indented code) are literal blocks: each
    line as written, no quoting, no doubled breaks; the YAML still reads back to the same state."""
    tree = "/testbed\n  ├── .git/\n  ├── src/\n  └── setup.py\n"
    makefile = "all:\n\tgcc -o app main.c  \n"
    code = "    def f():\n        return 1\n"
    world = load_world_text("name: s\ndomain: swe\ntools: [{name: a}]\n")
    world = world.model_copy(update={"state": {"tree": tree, "files": {"Makefile": makefile, "f.py": code}}})
    text = render_state(world)
    for body in (tree, makefile, code):
        lines = body.rstrip("\n").split("\n")
        start = text.split("\n").index(
            next(line for line in text.split("\n") if line.endswith(lines[0].strip()))
        )
        shown = text.split("\n")[start : start + len(lines)]
        indent = len(shown[-1]) - len(lines[-1]) if lines[-1] else 0
        assert [line[indent:] for line in shown] == lines
    assert "\\n" not in text and "'" not in text
    assert yaml.safe_load(text + "\n") == world.state  # the prompt drops only the final line break


def test_the_kept_character_count_is_the_prompt_s() -> None:
    world = web_world()
    transcript = Transcript(world, [Turn("go_back", {}, f"page {k}" * k) for k in range(1, 9)])
    for start in (0, 3, 8):
        prompt = transcript.prompt("SYS", "go_back", {}, ["a note"], start=start)
        assert prompt.chars == sum(len(m["content"]) for m in prompt.messages)
