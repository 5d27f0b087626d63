"""AgentWorldBench runs: samples in the benchmark's line format through a world-model backend, judged with the
trained judge protocol, one result line per sample (flushed, so a killed run resumes where it stopped), and the
paper's table: per domain and overall, on the (mean - 1) / 4 x 100 scale.

Scored as eval.py scores (its `judge` and `score` steps): a sample whose world model gave no content at all (or
failed) is not judged and counts as failed; every other answer is judged as eval.py extracts it, a degenerate one
(thinking that never closed, whitespace, empty tags, a bare marker) as `No output` or as the empty text it leaves,
so its low score counts. The table counts the degenerate answers per domain beside eval.py's figures. A line that
already holds the world model's answer (`gen`, as eval.py's predictions.jsonl does) is judged without asking the
world model again.
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
from aw_mcp.eval.judging import DIMENSIONS, NO_OUTPUT, judge_output, normalized
from aw_mcp.prompt.parse import strip_marker
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
    # The world model's reply content, when the line already has it (eval.py's predictions.jsonl).
    gen: str | None = None

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


def model_output(text: str) -> str:
    """The observation the world model wrote, as the judge receives it (eval.py's extraction, then its marker
    cleaning): `No output`, or an empty text, for a degenerate answer."""
    return strip_marker(judge_output(text))


def is_degenerate(output: str) -> bool:
    """An answer with no observation in it (what `model_output` makes of thinking that never closed, whitespace,
    empty tags or a bare marker)."""
    return output in ("", NO_OUTPUT)


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


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _cell(value: float | None, width: int) -> str:
    return f"{normalized(value):>{width}.2f}" if value is not None else f"{'-':>{width}}"


def table(results: Iterable[dict[str, Any]]) -> str:
    """The paper's table, as eval.py's `score` step computes it: per domain the judged samples (`valid`, of all;
    those without a judgement failed), each dimension's mean over its valid (> 0) scores and the samples' mean
    over those with one, all 0-100; then overall over every sample's mean. `degenerate`: answers with no
    observation in them, judged all the same (eval.py does not count them)."""
    by_domain: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_domain.setdefault(str(result["domain"]), []).append(result)
    header = (
        f"{'domain':<10}{'valid':>9}{'degenerate':>12}"
        + "".join(f"{d:>13}" for d in DIMENSIONS)
        + f"{'score':>9}"
    )
    lines = [header, "-" * len(header)]
    totals: list[float] = []
    for domain in [d for d in DOMAINS if d in by_domain] + sorted(set(by_domain) - set(DOMAINS)):
        rows = by_domain[domain]
        valid = [r["judgement"] for r in rows if r.get("judgement")]
        degenerate = sum(1 for r in rows if r.get("degenerate"))
        means = [m for v in valid if (m := _mean([s for s in v["scores"].values() if s > 0])) is not None]
        totals += means
        cells = f"{DISPLAY.get(domain, domain):<10}{f'{len(valid)}/{len(rows)}':>9}{degenerate:>12}"
        for dimension in DIMENSIONS:
            cells += _cell(
                _mean([v["scores"][dimension] for v in valid if v["scores"].get(dimension, 0) > 0]), 13
            )
        lines.append(cells + _cell(_mean(means), 9))
    lines.append("-" * len(header))
    overall = _cell(_mean(totals), 13 * len(DIMENSIONS) + 9).strip()
    lines.append(f"{'Overall':<10}{len(totals):>9}{'':>12}{overall:>{13 * len(DIMENSIONS) + 9}}")
    return "\n".join(lines)
