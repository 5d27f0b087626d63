"""AgentWorldBench runs: samples in the benchmark's line format through a world-model backend, judged with the
trained judge protocol, one result line per sample (flushed, so a killed run resumes where it stopped), and the
paper's table: per domain and overall, on the (mean - 1) / 4 x 100 scale.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aw_mcp.core.errors import InputError
from aw_mcp.core.jsonl import read_models
from aw_mcp.core.model_io import ChatMessage
from aw_mcp.eval.judging import DIMENSIONS, normalized
from aw_mcp.prompt.parse import parse_answer
from aw_mcp.spec.domains import DOMAINS

DISPLAY = {
    "mcp": "MCP",
    "search": "Search",
    "terminal": "Terminal",
    "swe": "SWE",
    "android": "Android",
    "web": "Web",
    "os": "OS",
}


class Sample(BaseModel):
    """One AgentWorldBench line: the sample's own system prompt, its turns and their ground-truth observations."""

    model_config = ConfigDict(extra="allow")

    system_str: str = ""
    prompt: list[str] = Field(min_length=1)
    response: list[str] = Field(default_factory=list)
    current_prompt: str = ""
    turn_idx: int = Field(ge=1)
    total_turns: int | None = None
    task: str = "mcp"
    id: str | int | None = None

    @field_validator("prompt", "response", mode="before")
    @classmethod
    def _one_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @property
    def domain(self) -> str:
        return self.task.rsplit("/", 1)[-1]

    @property
    def position(self) -> int:
        return self.turn_idx - 1

    def messages(self) -> list[ChatMessage]:
        """As the official evaluation sends them: system, earlier (prompt, response) pairs, the current prompt."""
        messages: list[ChatMessage] = (
            [{"role": "system", "content": self.system_str}] if self.system_str else []
        )
        for prompt, response in zip(
            self.prompt[: self.position], self.response[: self.position], strict=False
        ):
            messages += [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        messages.append({"role": "user", "content": self.current_turn})
        return messages

    @property
    def current_turn(self) -> str:
        if self.position < len(self.prompt):
            return self.prompt[self.position]
        return self.current_prompt

    @property
    def context(self) -> list[tuple[str, str]]:
        return list(zip(self.prompt[: self.position], self.response[: self.position], strict=False))

    @property
    def ground_truth(self) -> str:
        return self.response[self.position] if self.position < len(self.response) else ""


@dataclass(frozen=True)
class Loaded:
    key: str
    sample: Sample


def load_samples(path: str | Path) -> list[Loaded]:
    """Every sample with a stable key (its `id`, else a hash of its line). Raises ValueError naming file:line."""
    out = []
    for number, line, sample in read_models(path, Sample):
        if sample.domain not in DOMAINS:
            raise InputError(
                f"{path}:{number}: task: unknown domain {sample.domain!r} (expected one of {DOMAINS})"
            )
        digest = hashlib.sha256(line.strip().encode()).hexdigest()[:16]
        out.append(Loaded(f"id:{sample.id}" if sample.id is not None else f"sha:{digest}", sample))
    return out


def model_output(text: str, reasoning: str = "") -> str:
    """The observation the world model wrote, as the judge receives it (thinking, tags and the marker removed)."""
    return parse_answer(text, reasoning).observation


def finished_keys(results: Path) -> set[str]:
    """Samples with a result line; a line cut short by a crash does not count, so that sample runs again."""
    done = set()
    if results.exists():
        for line in results.read_text(encoding="utf-8").splitlines():
            try:
                done.add(str(json.loads(line)["key"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return done


def read_results(results: Path) -> list[dict[str, Any]]:
    out = []
    for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def table(results: Iterable[dict[str, Any]]) -> str:
    """The paper's table: per domain the judged samples, each dimension and the total, all 0-100; then overall."""
    by_domain: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_domain.setdefault(str(result["domain"]), []).append(result)
    header = f"{'domain':<10}{'valid':>9}" + "".join(f"{d:>13}" for d in DIMENSIONS) + f"{'score':>9}"
    lines = [header, "-" * len(header)]
    totals: list[float] = []
    for domain in [d for d in DOMAINS if d in by_domain] + sorted(set(by_domain) - set(DOMAINS)):
        rows = by_domain[domain]
        valid = [r["judgement"] for r in rows if r.get("judgement")]
        totals += [v["mean"] for v in valid]
        cells = f"{DISPLAY.get(domain, domain):<10}{f'{len(valid)}/{len(rows)}':>9}"
        for dimension in DIMENSIONS:
            values = [v["scores"][dimension] for v in valid if v["scores"].get(dimension, 0) > 0]
            cells += f"{normalized(sum(values) / len(values)):>13.2f}" if values else f"{'-':>13}"
        mean = sum(v["mean"] for v in valid) / len(valid) if valid else None
        cells += f"{normalized(mean):>9.2f}" if mean is not None else f"{'-':>9}"
        lines.append(cells)
    lines.append("-" * len(header))
    overall = f"{normalized(sum(totals) / len(totals)):.2f}" if totals else "-"
    lines.append(f"{'Overall':<10}{len(totals):>9}{overall:>{13 * len(DIMENSIONS) + 9}}")
    return "\n".join(lines)
