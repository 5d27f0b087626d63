"""The world-model conversation: render it in the trained shape, and parse the model's answer.

Shape (see docs/ARCHITECTURE.md): a system prompt from `prompts/<domain>/system_prompt.txt` with the world filled
into named slots; one user turn per agent action (`### Turn N`, the current screen for screen domains, then
`**Action:**` and the action); each earlier observation as the following assistant turn.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from aw_mcp.backends.base import ChatMessage
from aw_mcp.bundled import prompts_dir
from aw_mcp.domains import SCREEN_DOMAINS
from aw_mcp.world import WorldSpec

SYSTEM_SLOTS = (
    "world_name",
    "world_description",
    "now",
    "tool_definitions",
    "demonstrations",
    "facts",
    "initial_state",
)
OBSERVATION_MARKER = "**Environment Observation:**"


@dataclass(frozen=True)
class Turn:
    """One earlier action of the session and the observation the agent saw."""

    tool: str
    arguments: dict[str, Any]
    observation: str


def load_template(domain: str, kind: str = "system_prompt") -> str:
    path = prompts_dir() / domain / f"{kind}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FileNotFoundError(f"prompt template {path} is missing ({exc.strerror})") from None


def fill_slots(template: str, values: dict[str, str]) -> str:
    """Replace `{name}` for the given names only, so JSON braces in a template survive untouched."""
    pattern = re.compile(r"\{(" + "|".join(re.escape(k) for k in values) + r")\}")
    return pattern.sub(lambda m: values[m.group(1)], template)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def render_tool_definitions(world: WorldSpec) -> str:
    definitions = []
    for tool in world.tools:
        wire = tool.wire()
        if tool.outputWrapper and tool.outputSchema:  # the model writes the API's own (unwrapped) value
            wire["outputSchema"] = tool.outputSchema["properties"][tool.outputWrapper]
        definitions.append(wire)
    return _json(definitions)


def render_result(result: Any) -> str:
    return result if isinstance(result, str) else _json(result)


def render_demonstrations(world: WorldSpec) -> str:
    blocks = []
    for tool in world.tools:
        for example in tool.examples:
            blocks.append(
                f"**Action:**\n{render_action(world, tool.name, example.arguments)}\n\n"
                f"{OBSERVATION_MARKER}\n{render_result(example.result)}"
            )
    return "\n\n---\n\n".join(blocks) if blocks else "(none: infer the format from the tool definitions)"


def render_facts(world: WorldSpec) -> str:
    if not world.facts:
        return "(none beyond common knowledge)"
    lines = []
    for i, fact in enumerate(world.facts, 1):
        scope = f" (applies to: {', '.join(fact.tools)})" if fact.tools else ""
        lines.append(f"{i}. {fact.text}{scope}")
    return "\n".join(lines)


def render_state(world: WorldSpec) -> str:
    if world.state is None:
        return "(not specified: invent a plausible, self-consistent state and keep to it)"
    if isinstance(world.state, str):
        return world.state.strip()
    return yaml.safe_dump(world.state, sort_keys=False, allow_unicode=True, width=100).strip()


def render_system_prompt(world: WorldSpec, now: str, template: str | None = None) -> str:
    values = {
        "world_name": world.name,
        "world_description": world.description.strip() or world.name,
        "now": now,
        "tool_definitions": render_tool_definitions(world),
        "demonstrations": render_demonstrations(world),
        "facts": render_facts(world),
        "initial_state": render_state(world),
    }
    return fill_slots(template if template is not None else load_template(world.domain), values)


def scoped_facts(world: WorldSpec, tool: str) -> list[str]:
    """Facts scoped to this tool: repeated in the action turn, where the model attends to them most."""
    return [f.text for f in world.facts if f.tools and any(fnmatch.fnmatchcase(tool, p) for p in f.tools)]


def render_action(world: WorldSpec, tool: str, arguments: dict[str, Any]) -> str:
    """The action in the shape the model was trained on for this domain."""
    if world.domain == "terminal" and tool == "send_keys":
        step = {"keystrokes": arguments.get("keystrokes", ""), "duration": arguments.get("duration", 1.0)}
        return f"```json\n{json.dumps([step], ensure_ascii=False)}\n```"
    if world.domain == "os" and tool == "run_gui_code":
        return f"```python\n{arguments.get('code', '')}\n```"
    if world.domain in ("android", "web") and "action" in arguments:
        params = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items() if k != "action"
        )
        return f"```\n{arguments['action']}({params})\n```"
    call = {"name": tool, "arguments": arguments}
    return f"```json\n{json.dumps(call, ensure_ascii=False)}\n```"


def current_screen(world: WorldSpec, history: Sequence[Turn]) -> str:
    return history[-1].observation if history else render_state(world)


def render_user_turn(
    world: WorldSpec,
    number: int,
    tool: str,
    arguments: dict[str, Any],
    history: Sequence[Turn] = (),
    notes: Iterable[str] = (),
) -> str:
    parts = [f"### Turn {number}"]
    if world.domain in SCREEN_DOMAINS:
        parts.append(f"**Current Screen:**\n{current_screen(world, history)}")
    parts.append(f"**Action:**\n{render_action(world, tool, arguments)}")
    notes = [n for n in notes if n]
    if notes:
        parts.append("**World notes for this step:**\n" + "\n".join(f"- {n}" for n in notes))
    return "\n\n".join(parts)


def render_observation_turn(observation: str) -> str:
    return f"{OBSERVATION_MARKER}\n{observation}"


def build_messages(
    world: WorldSpec,
    system_prompt: str,
    history: Sequence[Turn],
    tool: str,
    arguments: dict[str, Any],
    notes: Iterable[str] = (),
) -> list[ChatMessage]:
    messages: list[ChatMessage] = [{"role": "system", "content": system_prompt}]
    for i, turn in enumerate(history, 1):
        messages.append(
            {
                "role": "user",
                "content": render_user_turn(world, i, turn.tool, turn.arguments, history[: i - 1]),
            }
        )
        messages.append({"role": "assistant", "content": render_observation_turn(turn.observation)})
    notes = [*scoped_facts(world, tool), *notes]
    messages.append(
        {
            "role": "user",
            "content": render_user_turn(world, len(history) + 1, tool, arguments, history, notes),
        }
    )
    return messages


def messages_hash(messages: Sequence[ChatMessage]) -> str:
    blob = json.dumps(list(messages), sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# Parsing the model's answer
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedAnswer:
    observation: str
    thinking: str


_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)
_PREDICTED = re.compile(
    r"<predicted_observation>(.*?)(?:</predicted_observation>|\Z)", re.DOTALL | re.IGNORECASE
)
_MARKER = re.compile(r"(?:\*\*|##+\s*)?Environment Observation(?:\*\*)?\s*:(?:\*\*)?", re.IGNORECASE)
_FENCE = re.compile(r"^```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)\n?```$", re.DOTALL)


def _split_thinking(text: str) -> tuple[str, str]:
    thoughts = [m.group(1).strip() for m in _THINK_BLOCK.finditer(text)]
    rest = _THINK_BLOCK.sub("", text)
    lower = rest.lower()
    if "</think>" in lower:
        # A stray close tag: the chat template opened <think> in the prompt, so all before it is thinking.
        cut = lower.rfind("</think>")
        thoughts.append(_THINK_TAG.sub("", rest[:cut]).strip())
        rest = rest[cut + len("</think>") :]
    elif "<think>" in lower:
        # Unclosed: the model never finished thinking. Keep any answer it still wrote after a marker.
        start = lower.find("<think>")
        tail = rest[start + len("<think>") :]
        answer_at = min(
            (m.start() for m in (_PREDICTED.search(tail), _MARKER.search(tail)) if m is not None),
            default=None,
        )
        if answer_at is None:
            thoughts.append(tail.strip())
            rest = rest[:start]
        else:
            thoughts.append(tail[:answer_at].strip())
            rest = rest[:start] + tail[answer_at:]
    return rest, "\n\n".join(t for t in thoughts if t)


def strip_code_fence(text: str) -> str:
    """Unwrap one code fence that encloses the whole text (models like to fence JSON and screens)."""
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group(2).strip("\n") if match else stripped


def parse_answer(text: str, reasoning: str = "") -> ParsedAnswer:
    rest, thinking = _split_thinking(text or "")
    thinking = "\n\n".join(t for t in (reasoning.strip(), thinking) if t)
    predicted = _PREDICTED.search(rest)
    if predicted is not None:
        body = predicted.group(1)
    else:
        markers = list(_MARKER.finditer(rest))
        body = rest[markers[-1].end() :] if markers else rest
    body = body.replace("</predicted_observation>", "").strip()
    return ParsedAnswer(observation=strip_code_fence(body), thinking=thinking)


def parse_json_observation(observation: str) -> Any:
    """The observation as JSON; tolerates fences and prose around one JSON object. Raises ValueError."""
    text = strip_code_fence(observation)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    for start, char in enumerate(text):
        if char in "{[":
            try:
                value, _ = decoder.raw_decode(text[start:])
                return value
            except json.JSONDecodeError:
                continue
    raise ValueError("the observation is not JSON")
