"""Prompt templates: a directory laid out like `prompts/` (`<domain>/system_prompt.txt`, `<domain>/judge_system_prompt.txt`),
the bundled one or a user's (`--prompts DIR`, world key `prompts:`), with every `{slot}` checked when it is loaded.

A slot is `{name}` with a Python identifier inside; other braces (JSON in examples) are text. A template may use any
subset of the known slots: the official Qwen-AgentWorld templates use only `{tool_definitions}` and `{demonstrations}`
and work as they are. An unknown slot is an error at start-up, naming the file and line, never at call time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aw_mcp.core.errors import UserError
from aw_mcp.spec.bundled import prompts_dir

SYSTEM_SLOTS: tuple[str, ...] = (
    "world_name",
    "world_description",
    "now",
    "tool_definitions",
    "demonstrations",
    "facts",
    "initial_state",
)
JUDGE_SLOTS: tuple[str, ...] = ("world_reference",)
SLOTS_BY_KIND: dict[str, tuple[str, ...]] = {
    "system_prompt": SYSTEM_SLOTS,
    "judge_system_prompt": JUDGE_SLOTS,
}
_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class TemplateError(UserError, ValueError):
    """A template is missing or names a slot nobody fills; the message is `path:line: what was expected`."""


def slots_in(text: str) -> list[tuple[str, int]]:
    """Each `{slot}` in the template with its 1-based line, in one pass (counting the lines from the previous
    slot, not from the start: a 0.8 MB template of slots took 24 s that way)."""
    found = []
    line, counted = 1, 0
    for match in _SLOT.finditer(text):
        line += text.count("\n", counted, match.start())
        counted = match.start()
        found.append((match.group(1), line))
    return found


def fill_slots(template: str, values: dict[str, str]) -> str:
    """Replace `{name}` for the given names only, so JSON braces in a template survive untouched."""
    if not values:
        return template
    pattern = re.compile(r"\{(" + "|".join(re.escape(k) for k in values) + r")\}")
    return pattern.sub(lambda m: values[m.group(1)], template)


@dataclass(frozen=True)
class PromptDir:
    """Where the templates come from; `load` reads and checks one."""

    directory: Path

    @property
    def bundled(self) -> bool:
        return self.directory.resolve() == prompts_dir().resolve()

    def path(self, domain: str, kind: str = "system_prompt") -> Path:
        return self.directory / domain / f"{kind}.txt"

    def load(self, domain: str, kind: str = "system_prompt") -> str:
        path = self.path(domain, kind)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TemplateError(
                f"{path}:1: prompt template is missing ({exc.strerror or exc}); a prompts directory holds "
                f"<domain>/system_prompt.txt and <domain>/judge_system_prompt.txt"
            ) from None
        allowed = SLOTS_BY_KIND[kind]
        for name, line in slots_in(text):
            if name not in allowed:
                raise TemplateError(
                    f"{path}:{line}: unknown slot {{{name}}}: expected one of "
                    + ", ".join("{" + s + "}" for s in allowed)
                    + " (write other braces as they are; only {identifier} is a slot)"
                )
        return text


BUNDLED = PromptDir(prompts_dir())


def prompt_dir(flag: str | None, world_prompts: str | None, world_path: Path | None) -> PromptDir:
    """`--prompts DIR` wins over the world's `prompts:` (relative to the world file); else the bundled templates."""
    if flag:
        chosen = Path(flag)
    elif world_prompts:
        chosen = Path(world_prompts)
        if not chosen.is_absolute() and world_path is not None:
            chosen = world_path.parent / chosen
    else:
        return BUNDLED
    if not chosen.is_dir():
        where = "--prompts" if flag else f"{world_path or 'world'}: prompts"
        raise TemplateError(
            f"{where}: {chosen} is not a directory laid out like prompts/ (<domain>/system_prompt.txt)"
        )
    return PromptDir(chosen)
