"""The world-model conversation, rendered in the trained format of its domain (the answer is read by
answer_parser.py; the frame's fixed text is answer_frame.py's).

Format (facts: docs/trained-format.md in the shared docs; README "The trained format"): a system prompt from the
domain's template with the world filled into named slots; one user turn per agent action, `### Turn N` on its own
line, then, on turn 1 of a screen domain, `**Current State:**` and the world's `screen:` verbatim (OS: the
`**Task Instruction:**` before it), then `**Action:**` and the action in the domain's trained shape; each earlier
observation, byte for byte, as the following assistant turn after `**Environment Observation:**`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from aw_mcp.core.model_io import ChatMessage
from aw_mcp.prompt.budget import CHARS_PER_TOKEN
from aw_mcp.prompt.catalog import CATALOG_SHARE, CatalogForm, render_definitions
from aw_mcp.prompt.frame import (
    ACTION,
    CURRENT_STATE,
    NOTES_HEADER,
    TASK_INSTRUCTION,
    observation_frame,
    turn_heading,
)
from aw_mcp.prompt.templates import BUNDLED, SYSTEM_SLOTS, fill_slots
from aw_mcp.prompt.world_channel import place_world
from aw_mcp.spec import androidworld, browsergym
from aw_mcp.spec.domains import TAGGED_DOMAINS

if TYPE_CHECKING:  # annotations only: world.py imports this module (its prompt-size check renders the prompt)
    from aw_mcp.spec.world import WorldSpec

__all__ = ["SYSTEM_SLOTS", "fill_slots"]

DEMONSTRATIONS_INTRO = (
    "Demonstrations: real calls of these tools and what they returned. Copy their shape, field names, id and date "
    "formats and level of detail."
)


@dataclass(frozen=True)
class Turn:
    """One earlier action of the session and the observation the agent saw."""

    tool: str
    arguments: dict[str, Any]
    observation: str


def load_template(domain: str, kind: str = "system_prompt") -> str:
    """A bundled template (checked like any other)."""
    return BUNDLED.load(domain, kind)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def _fence(body: str, language: str = "") -> str:
    return f"```{language}\n{body}\n```"


def render_tool_definitions(
    world: WorldSpec, form: CatalogForm = CatalogForm.FULL, called: str | None = None
) -> str:
    """The tools as the model reads them: JSON definitions in `form` (catalog_prompt.py; `called`: this call's
    tool); on the web, BrowserGym's function signatures; on Android, AndroidWorld's JSON action forms (and JSON for
    any tool a world adds beside them)."""
    signatures = []
    web = []
    tools = []
    for tool in world.tools:
        if world.domain == "web" and tool.name in browsergym.BY_NAME:
            web.append(tool.name)
        elif world.domain == "android" and tool.name in androidworld.BY_NAME:
            signatures.append(androidworld.BY_NAME[tool.name].template())
        else:
            tools.append(tool)
    if web:
        signatures.append(browsergym.action_space(web))
    parts = []
    if signatures:
        parts.append(_fence("\n".join(signatures), "text"))
    if tools or not signatures:
        parts.append(render_definitions(tools, world.defs, form, called))
    return "\n\n".join(parts)


def catalog_form(world: WorldSpec, template: str | None, budget_tokens: int) -> CatalogForm:
    """The best form of the catalog (catalog_prompt.py) whose system prompt takes at most CATALOG_SHARE of the
    prompt budget; COMPACT when none does."""
    for form in (CatalogForm.FULL, CatalogForm.SHARED):
        if form is CatalogForm.SHARED and not world.defs:
            break
        chars = len(render_system_prompt(world, "2026-01-01T00:00:00Z", template, form))
        if chars / CHARS_PER_TOKEN <= budget_tokens * CATALOG_SHARE:
            return form
    return CatalogForm.COMPACT


def render_result(result: Any) -> str:
    return result if isinstance(result, str) else _json(result)


def render_demonstrations(world: WorldSpec) -> str:
    """The tools' examples as trained few-shot turns; empty when the world has none (a template's own text around
    the slot then stands alone)."""
    blocks = []
    for tool in world.tools:
        for example in tool.examples:
            result = render_result(example.result)
            if world.domain in TAGGED_DOMAINS:
                prefix, suffix = observation_frame(tagged=True)
                answer = f"{prefix}{result}{suffix}"
            else:
                answer = render_observation_turn(world, tool.name, result)
            blocks.append(
                f"## Example {len(blocks) + 1}\n{turn_heading(1)}\n{ACTION}\n"
                f"{render_action(world, tool.name, example.arguments)}\n{answer}"
            )
    if not blocks:
        return ""
    return DEMONSTRATIONS_INTRO + "\n\n" + "\n\n".join(blocks)


def render_facts(world: WorldSpec) -> str:
    if not world.facts:
        return "(none beyond common knowledge)"
    lines = []
    for i, fact in enumerate(world.facts, 1):
        scope = f" (applies to: {', '.join(fact.tools)})" if fact.tools else ""
        lines.append(f"{i}. {fact.text}{scope}")
    return "\n".join(lines)


class _VerbatimDumper(yaml.SafeDumper):
    """YAML whose multi-line strings are literal blocks, written line for line: a file, a tree, a screen or command
    output reaches the model as it was written (a `view` or `cat -n` answer counts its lines). PyYAML alone would
    quote a string holding a tab or a trailing space, with `\n` escapes and doubled line breaks."""

    def choose_scalar_style(self) -> str:
        event = self.event
        if (
            getattr(event, "style", None) == "|"
            and not self.flow_level
            and not self.simple_key_context
            and _literal_safe(event.value)
        ):
            return "|"
        return super().choose_scalar_style()


def _literal_safe(text: str) -> bool:
    """Printable text (tabs allowed) that a literal block keeps exactly; anything else stays quoted."""
    return all(ch in "\t\n" or (ch.isprintable() and ch not in "\x85\u2028\u2029\ufeff") for ch in text)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value.strip("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_VerbatimDumper.add_representer(str, _represent_str)


# The last states rendered, by identity (the state of a loaded world is never changed): a state of megabytes takes
# PyYAML seconds, and the load check, the first call of each session and each fork's would render it again.
_RENDERED_STATES: OrderedDict[int, tuple[Any, str]] = OrderedDict()


def render_state(world: WorldSpec) -> str:
    if world.state is None:
        return "(not specified: invent a plausible, self-consistent state and keep to it)"
    if isinstance(world.state, str):
        return world.state.strip("\n").rstrip()
    cached = _RENDERED_STATES.get(id(world.state))
    if cached is not None and cached[0] is world.state:
        return cached[1]
    text = yaml.dump(world.state, Dumper=_VerbatimDumper, sort_keys=False, allow_unicode=True, width=100)
    _RENDERED_STATES[id(world.state)] = (world.state, text.rstrip("\n"))  # kept alive: its id stays its own
    while len(_RENDERED_STATES) > 8:
        _RENDERED_STATES.popitem(last=False)
    return text.rstrip("\n")


def system_values(
    world: WorldSpec, now: str, form: CatalogForm = CatalogForm.FULL, called: str | None = None
) -> dict[str, str]:
    return {
        "world_name": world.name,
        "world_description": world.description.strip() or world.name,
        "now": now,
        "tool_definitions": render_tool_definitions(world, form, called),
        "demonstrations": render_demonstrations(world),
        "facts": render_facts(world),
        "initial_state": render_state(world),
    }


def render_system_prompt(
    world: WorldSpec,
    now: str,
    template: str | None = None,
    form: CatalogForm = CatalogForm.FULL,
    called: str | None = None,
) -> str:
    """The system prompt: the template's slots filled; what of the world a template has no slot for (the official
    templates) placed where the official material has a channel for it (prompt/world_channel.py)."""
    text = template if template is not None else load_template(world.domain)
    values, suffix = place_world(text, system_values(world, now, form, called), world.domain)
    filled = fill_slots(text, values)
    return f"{filled.rstrip()}{suffix}" if suffix else filled


def scoped_facts(world: WorldSpec, tool: str) -> list[str]:
    """Facts scoped to this tool: repeated in the action turn, where the model attends to them most."""
    return [f.text for f in world.facts if f.tools and any(fnmatch.fnmatchcase(tool, p) for p in f.tools)]


def render_action(world: WorldSpec, tool: str, arguments: dict[str, Any]) -> str:
    """The action in the shape the model was trained on for this domain."""
    if world.domain == "terminal" and tool == "send_keys":
        # Durations are seconds as floats in the trained examples (0.5, 1.0, 2.0).
        step = {
            "keystrokes": arguments.get("keystrokes", ""),
            "duration": float(arguments.get("duration", 1.0)),
        }
        return _fence(_json([step]), "json")
    if world.domain == "os" and tool == "run_gui_code":
        return _fence(str(arguments.get("code", "")), "python")
    if world.domain == "web":
        call = browsergym.render_call(tool, arguments)
        if call is not None:
            return _fence(call)
    if world.domain == "android":
        action = androidworld.render_action(tool, arguments)  # one line, as in the AgentWorldBench rows
        if action is not None:
            return _fence(action, "json")
    return _fence(_json({"name": tool, "arguments": arguments}), "json")


def initial_screen(world: WorldSpec) -> str:
    """The world's `screen:` verbatim, less the line break YAML's block scalar adds at its end."""
    return (world.screen or "").rstrip("\n")


def render_user_turn(
    world: WorldSpec,
    number: int,
    tool: str,
    arguments: dict[str, Any],
    notes: Iterable[str] = (),
    *,
    screen: str | None = None,
    task: bool = False,
) -> str:
    """One action turn: `### Turn N`, then (when given) the Task Instruction and the current screen as
    `**Current State:**`, the action, and this step's world notes. Which turns carry a screen or the task is the
    transcript's decision (transcript.py)."""
    parts = []
    if task and world.task:
        parts.append(f"{TASK_INSTRUCTION}\n{world.task.strip()}")
    if screen is not None:
        parts.append(f"{CURRENT_STATE}\n{screen}")
    parts.append(f"{ACTION}\n{render_action(world, tool, arguments)}")
    notes = [n for n in notes if n]
    if notes:
        parts.append(NOTES_HEADER + "\n" + "\n".join(f"- {n}" for n in notes))
    return f"{turn_heading(number)}\n" + "\n\n".join(parts)


def render_observation_turn(world: WorldSpec, tool: str, observation: str) -> str:
    """An observation as the assistant turn that answered it: search results in their trained fenced block."""
    if world.domain == "search" and tool == "web_search" and not observation.startswith("```"):
        observation = _fence(observation)
    prefix, _ = observation_frame(tagged=False)
    return f"{prefix}{observation}"


def message_digest(message: ChatMessage) -> bytes:
    return hashlib.sha256(f"{message['role']}\n{message['content']}".encode()).digest()


def messages_hash(messages: Sequence[ChatMessage], digests: Sequence[bytes] | None = None) -> str:
    """The prompt's identity in the trajectory: a hash over the messages' own hashes, so a session that keeps its
    turns' digests (transcript.py) hashes call 500's prompt without re-reading calls 1-499."""
    if digests is None:
        digests = [message_digest(m) for m in messages]
    return hashlib.sha256(b"".join(digests)).hexdigest()
