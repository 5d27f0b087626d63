"""A session's conversation with the world model, rendered one turn at a time and kept.

History is append-only, so each earlier turn is rendered once, when it enters the history, with its own number and
the screen that was current then; a call's prompt is the system prompt, the kept turns from the first one shown,
and the new action turn. Call 500 costs what call 5 costs (bench/call_overhead.py).

Which turns carry what (facts: trained-format.md in the shared docs):
- android, web, os: every turn shows the then-current screen (`**Current State:**`: the previous observation, or
  the world's `screen:` on turn 1); turn 1 opens with the `**Task Instruction:**` when the world has a `task:`.
- terminal: turn 1 shows the screen; later turns only the action (each observation already is the next screen).
- Compaction (WorldSession.fit) leaves the oldest turns out: the kept turns keep their numbers (`### Turn 37`
  stays 37) and their shape, the first one shown included: a mid-trajectory turn, as the benchmark rows show one
  (android, web, os: its then-current screen; never the task again, which the compaction note carries). Only a
  terminal prompt that keeps no earlier turn shows the current screen on its action turn, as turn 1 does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aw_mcp.core.model_io import ChatMessage
from aw_mcp.prompt.render import (
    Turn,
    initial_screen,
    message_digest,
    messages_hash,
    render_observation_turn,
    render_user_turn,
    scoped_facts,
)
from aw_mcp.spec.domains import EVERY_TURN_SCREEN_DOMAINS, SCREEN_DOMAINS, TASK_DOMAINS
from aw_mcp.spec.world import WorldSpec


@dataclass(frozen=True)
class Prompt:
    messages: list[ChatMessage]
    hash: str  # messages_hash(messages), from the kept digests
    chars: int  # the messages' total content length, from the kept sums


class Transcript:
    """The rendered turns of one session. The messages it hands out are shared with later prompts: read-only."""

    def __init__(self, world: WorldSpec, turns: Iterable[Turn] = ()):
        self.world = world
        self.turns: list[Turn] = []
        self._messages: list[ChatMessage] = []  # user, assistant for each turn
        self._digests: list[bytes] = []
        self._chars: list[int] = [0]  # _chars[i]: content length of the first i messages
        self._system: tuple[str, bytes] | None = None  # the last system prompt and its digest
        for turn in turns:
            self.append(turn)

    def __len__(self) -> int:
        return len(self.turns)

    def copy(self) -> Transcript:
        """An independent transcript with the same turns (a fork): the rendered turns are shared, read-only."""
        twin = Transcript(self.world)
        twin.turns, twin._messages, twin._digests = (
            list(self.turns),
            list(self._messages),
            list(self._digests),
        )
        twin._chars, twin._system = list(self._chars), self._system
        return twin

    def screen_at(self, number: int) -> str:
        """The screen the agent is looking at when it takes action `number` (1-based)."""
        return self.turns[number - 2].observation if number > 1 else initial_screen(self.world)

    def _user_turn(
        self, number: int, tool: str, arguments: dict[str, Any], notes: Iterable[str] = (), *, opening: bool
    ) -> ChatMessage:
        """Turn `number`; `opening`: no earlier turn is shown before it (turn 1, or everything compacted)."""
        domain = self.world.domain
        shows_screen = domain in EVERY_TURN_SCREEN_DOMAINS or (opening and domain in SCREEN_DOMAINS)
        content = render_user_turn(
            self.world,
            number,
            tool,
            arguments,
            notes,
            screen=self.screen_at(number) if shows_screen else None,
            task=number == 1 and domain in TASK_DOMAINS,
        )
        return {"role": "user", "content": content}

    def append(self, turn: Turn) -> None:
        number = len(self.turns) + 1
        user = self._user_turn(number, turn.tool, turn.arguments, opening=number == 1)
        assistant: ChatMessage = {
            "role": "assistant",
            "content": render_observation_turn(self.world, turn.tool, turn.observation),
        }
        self.turns.append(turn)
        self._messages += [user, assistant]
        self._digests += [message_digest(user), message_digest(assistant)]
        total = self._chars[-1] + len(user["content"])
        self._chars += [total, total + len(assistant["content"])]

    def prompt(
        self,
        system_prompt: str,
        tool: str,
        arguments: dict[str, Any],
        notes: Iterable[str] = (),
        start: int = 0,
    ) -> Prompt:
        """The messages for the next action, showing the turns from index `start` (0-based) on."""
        start = min(max(start, 0), len(self.turns))
        system: ChatMessage = {"role": "system", "content": system_prompt}
        if self._system is None or self._system[0] is not system_prompt:  # one digest per system prompt
            self._system = (system_prompt, message_digest(system))
        messages = [system]
        digests = [self._system[1]]
        chars = len(system_prompt)
        if start < len(self.turns):  # every kept turn as it was rendered, the first one included
            messages += self._messages[2 * start :]
            digests += self._digests[2 * start :]
            chars += self._chars[-1] - self._chars[2 * start]
        notes = [*scoped_facts(self.world, tool), *notes]
        current = self._user_turn(
            len(self.turns) + 1, tool, arguments, notes, opening=start >= len(self.turns)
        )
        messages.append(current)
        digests.append(message_digest(current))
        chars += len(current["content"])
        return Prompt(messages, messages_hash(messages, digests), chars)


def build_messages(
    world: WorldSpec,
    system_prompt: str,
    history: Sequence[Turn],
    tool: str,
    arguments: dict[str, Any],
    notes: Iterable[str] = (),
) -> list[ChatMessage]:
    """The whole prompt for one action after `history` (for callers without a session's transcript)."""
    return Transcript(world, history).prompt(system_prompt, tool, arguments, notes).messages
