"""Calibration (`aw-mcp calibrate`): how close the world model's shadow predictions came to the real answers.

Read from trajectories recorded by `aw-mcp mirror --shadow`: every call a real server answered, with the prediction
written beside it. Per tool and for the whole world:

- errors: how often the prediction was an error when the real answer was (`errors_caught`), and how often the real
  answer was an error when the prediction was (`errors_real`); `error_agreement`, both sides the same;
- JSON answers (both sides JSON, neither an error): `structure`, the share with the same keys and types all the
  way down, and `values`, the share of the real answer's fields (leaf paths, list positions as `[]`) whose value
  the prediction has at the same place, overall and per field path;
- text answers: `text`, the mean normalized similarity (case and whitespace folded, difflib's ratio);
- with judgements (`--judge`), the trained judge's five-dimension mean of each prediction against the real answer.

Calls without a real answer (the upstream gave none, a fault answered instead) or without a usable prediction are
counted apart, with why. The worst divergences are kept for a side-by-side view.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from aw_mcp.core.errors import UsageError
from aw_mcp.trajectory.records import CallRecord, read_trajectory

CALIBRATION_VERSION = 1
# What --fail-on can name, each a rate in [0, 1] of the whole world: the run fails when one is below its threshold.
METRICS = (
    "error_agreement",
    "errors_caught",
    "errors_real",
    "structure",
    "values",
    "text",
    "judge",
    "coverage",
)
WORST_SHOWN = 5
_SPACE = re.compile(r"\s+")


class Divergence(BaseModel):
    """One call, the real answer and the prediction side by side, with how far apart they are (0: nothing agrees)."""

    trajectory: str
    session: str | None
    index: int
    tool: str
    arguments: dict[str, Any]
    agreement: float
    why: str
    real: str
    predicted: str


class Agreement(BaseModel):
    """The figures of one tool, or of the whole world. A rate is None when nothing was there to measure it on."""

    calls: int = 0  # answered by a real server
    predicted: int = 0  # of those, with a usable prediction
    unpredicted: dict[str, int] = Field(default_factory=dict)  # why the others have none
    coverage: float | None = None
    error_agreement: float | None = None
    real_errors: int = 0
    errors_caught: float | None = None
    predicted_errors: int = 0
    errors_real: float | None = None
    json_calls: int = 0
    structure: float | None = None
    values: float | None = None
    fields: dict[str, float] = Field(default_factory=dict)  # value agreement per field path
    text_calls: int = 0
    text: float | None = None
    judged: int = 0
    judge: float | None = None  # mean of the judge's 1-5 means, as (mean - 1) / 4 (0-1, like the others)


class Calibration(BaseModel):
    version: int = CALIBRATION_VERSION
    trajectories: list[str]
    world: Agreement
    tools: dict[str, Agreement]
    worst: list[Divergence]


# ---------------------------------------------------------------------------------------------------------------
# comparing one answer with its prediction
# ---------------------------------------------------------------------------------------------------------------


def as_json(structured: Any, text: str | None) -> Any:
    """An answer's JSON value: its structured content, else its text parsed; `NOT_JSON` when it is neither."""
    if structured is not None:
        return structured
    if text is None:
        return NOT_JSON
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return NOT_JSON


NOT_JSON: Any = object()


def shape(value: Any) -> Any:
    """Keys and types all the way down (a list: the shapes of its items, in order)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def leaves(value: Any, path: str = "") -> Iterable[tuple[str, str, Any]]:
    """(indexed path, field path with list positions as `[]`, value) of every leaf."""
    if isinstance(value, dict):
        if not value:
            yield path, _field(path), {}
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        if not value:
            yield path, _field(path), []
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    else:
        yield path, _field(path), value


def _field(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path) or "$"


def at(value: Any, path: str) -> Any:
    """The value at an indexed path (`NOT_JSON` when the prediction has nothing there)."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            i = int(part[1:-1])
            if not isinstance(value, list) or i >= len(value):
                return NOT_JSON
            value = value[i]
        else:
            if not isinstance(value, dict) or part not in value:
                return NOT_JSON
            value = value[part]
    return value


def similarity(a: str, b: str) -> float:
    """Normalized text similarity: case and runs of whitespace folded, then difflib's ratio (1: the same)."""
    x, y = _SPACE.sub(" ", a.strip().lower()), _SPACE.sub(" ", b.strip().lower())
    if x == y:
        return 1.0
    return difflib.SequenceMatcher(None, x, y, autojunk=False).ratio()


def real_answer(call: CallRecord) -> str | None:
    """The real server's answer to a call (before any fault changed what the agent saw), or None when there is
    none to compare with: the upstream gave no answer, or a fault answered instead of it."""
    if call.answered_by == "model" or call.error is not None:
        return None
    if call.truth is not None:
        return call.truth
    if not call.in_history:  # an aborted call or a replay without the real answer asked for
        return None
    return call.observation


# ---------------------------------------------------------------------------------------------------------------
# aggregating
# ---------------------------------------------------------------------------------------------------------------


class _Tally:
    def __init__(self) -> None:
        self.calls = self.predicted = 0
        self.unpredicted: Counter[str] = Counter()
        self.same_error = self.real_errors = self.caught = self.predicted_errors = self.errors_real = 0
        self.json_calls = self.same_shape = self.leaves = self.leaves_equal = 0
        self.fields: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.texts: list[float] = []
        self.judged: list[float] = []

    def result(self) -> Agreement:
        def rate(part: float, whole: float) -> float | None:
            return round(part / whole, 4) if whole else None

        return Agreement(
            calls=self.calls,
            predicted=self.predicted,
            unpredicted=dict(self.unpredicted),
            coverage=rate(self.predicted, self.calls),
            error_agreement=rate(self.same_error, self.predicted),
            real_errors=self.real_errors,
            errors_caught=rate(self.caught, self.real_errors),
            predicted_errors=self.predicted_errors,
            errors_real=rate(self.errors_real, self.predicted_errors),
            json_calls=self.json_calls,
            structure=rate(self.same_shape, self.json_calls),
            values=rate(self.leaves_equal, self.leaves),
            fields={path: round(eq / n, 4) for path, (eq, n) in sorted(self.fields.items())},
            text_calls=len(self.texts),
            text=rate(sum(self.texts), len(self.texts)),
            judged=len(self.judged),
            judge=rate(sum(self.judged), len(self.judged)),
        )


def _unpredicted_reason(call: CallRecord) -> str | None:
    if call.shadow is None:
        return "no prediction recorded"
    if call.shadow.error is not None:
        error = call.shadow.error
        return (
            "cancelled"
            if error.startswith("cancelled")
            else ("skipped" if error.startswith("skipped") else "failed")
        )
    return None


def calibrate(
    runs: Sequence[tuple[str, Sequence[CallRecord]]],
    judgements: dict[tuple[str, str | None, int], float] | None = None,
    worst: int = WORST_SHOWN,
) -> Calibration:
    """`runs`: (trajectory name, its calls). `judgements`: (trajectory, session, index) -> the judge's 1-5 mean."""
    world, tools = _Tally(), defaultdict(_Tally)
    divergences: list[Divergence] = []
    for name, calls in runs:
        for call in calls:
            real = real_answer(call)
            if real is None:
                continue
            tallies = (world, tools[call.tool])
            for t in tallies:
                t.calls += 1
            why = _unpredicted_reason(call)
            if why is not None:
                for t in tallies:
                    t.unpredicted[why] += 1
                continue
            assert call.shadow is not None
            divergence = _compare(name, call, real, tallies)
            judged = (judgements or {}).get((name, call.session, call.index))
            if judged is not None:
                for t in tallies:
                    t.judged.append((judged - 1) / 4)
            if divergence is not None:
                divergences.append(divergence)
    divergences.sort(key=lambda d: (d.agreement, d.trajectory, d.index))
    return Calibration(
        trajectories=[name for name, _ in runs],
        world=world.result(),
        tools={tool: tally.result() for tool, tally in sorted(tools.items())},
        worst=[d for d in divergences if d.agreement < 1][:worst],
    )


def _compare(name: str, call: CallRecord, real: str, tallies: tuple[_Tally, ...]) -> Divergence | None:
    shadow = call.shadow
    assert shadow is not None
    predicted = shadow.observation or ""
    real_error, predicted_error = call.is_error, shadow.is_error
    for t in tallies:
        t.predicted += 1
        t.same_error += real_error == predicted_error
        t.real_errors += real_error
        t.caught += real_error and predicted_error
        t.predicted_errors += predicted_error
        t.errors_real += real_error and predicted_error
    side = {
        "trajectory": name,
        "session": call.session,
        "index": call.index,
        "tool": call.tool,
        "arguments": call.arguments,
        "real": real,
        "predicted": predicted,
    }
    if real_error != predicted_error:
        what = (
            "the real answer is an error, the prediction is not"
            if real_error
            else "only the prediction is an error"
        )
        return Divergence(agreement=0.0, why=what, **side)
    if real_error:  # both errors: agreement on that is what counts; their wording is the text measure's
        score = similarity(real, predicted)
        for t in tallies:
            t.texts.append(score)
        return Divergence(agreement=score, why="both errors; text similarity", **side)
    real_value = as_json(call.structured if call.truth is None else None, real)
    predicted_value = as_json(shadow.structured, predicted)
    if real_value is not NOT_JSON and predicted_value is not NOT_JSON:
        same_shape = shape(real_value) == shape(predicted_value)
        paths = list(leaves(real_value))
        equal = 0
        for indexed, field, value in paths:
            hit = at(predicted_value, indexed)
            same = hit is not NOT_JSON and hit == value and type(hit) is type(value)
            equal += same
            for t in tallies:
                t.fields[field][0] += same
                t.fields[field][1] += 1
        for t in tallies:
            t.json_calls += 1
            t.same_shape += same_shape
            t.leaves += len(paths)
            t.leaves_equal += equal
        score = equal / len(paths) if paths else float(same_shape)
        why = f"{equal} of {len(paths)} fields equal" + ("" if same_shape else "; keys or types differ")
        return Divergence(agreement=round(score, 4), why=why, **side)
    score = similarity(real, predicted)
    for t in tallies:
        t.texts.append(score)
    return Divergence(agreement=round(score, 4), why="text similarity", **side)


def calibrate_files(
    paths: Sequence[str | Path], judgements: dict[tuple[str, str | None, int], float] | None = None
) -> Calibration:
    return calibrate([(str(p), list(read_trajectory(p))) for p in paths], judgements)


# ---------------------------------------------------------------------------------------------------------------
# the gate and the text
# ---------------------------------------------------------------------------------------------------------------


def parse_thresholds(text: str) -> dict[str, float]:
    """`values=0.8,error_agreement=0.95` → the thresholds; a bad one is a usage error naming the valid metrics."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in METRICS:
            raise UsageError(
                f"--fail-on {part!r}: expected METRIC=RATE with METRIC one of {', '.join(METRICS)}"
            )
        try:
            rate = float(value)
        except ValueError:
            raise UsageError(f"--fail-on {part!r}: {value!r} is not a number (a rate from 0 to 1)") from None
        if not 0 <= rate <= 1:
            raise UsageError(f"--fail-on {part!r}: a rate is from 0 to 1")
        out[name] = rate
    if not out:
        raise UsageError("--fail-on names no threshold (e.g. --fail-on values=0.8,error_agreement=0.95)")
    return out


def below(result: Calibration, thresholds: dict[str, float]) -> dict[str, tuple[float | None, float]]:
    """The world-wide metrics under their thresholds: name -> (measured, threshold). A metric with nothing to
    measure it on (None) fails too: a gate must not pass on no evidence."""
    out = {}
    for name, threshold in thresholds.items():
        measured = getattr(result.world, name)
        if measured is None or measured < threshold:
            out[name] = (measured, threshold)
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _excerpt(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def calibration_text(result: Calibration) -> str:
    header = f"{'tool':<28} {'calls':>5} {'pred':>5} {'err=':>5} {'caught':>6} {'real':>5} {'struct':>6} {'values':>6} {'text':>5} {'judge':>5}"
    lines = [
        f"calibration of {len(result.trajectories)} trajectory(ies): {', '.join(result.trajectories)}",
        header,
    ]

    def row(name: str, a: Agreement) -> str:
        return (
            f"{name[:28]:<28} {a.calls:>5} {a.predicted:>5} {_pct(a.error_agreement):>5} {_pct(a.errors_caught):>6} "
            f"{_pct(a.errors_real):>5} {_pct(a.structure):>6} {_pct(a.values):>6} {_pct(a.text):>5} {_pct(a.judge):>5}"
        )

    lines += [row(tool, agreement) for tool, agreement in result.tools.items()]
    lines.append(row("(world)", result.world))
    missing = result.world.unpredicted
    if missing:
        lines.append("without a prediction: " + ", ".join(f"{why} {n}" for why, n in missing.items()))
    lines.append(
        "err= error agreement; caught: real errors predicted as errors; real: predicted errors that were real; "
        "struct: same keys and types; values: fields equal; text: normalized similarity"
    )
    if result.worst:
        lines.append("")
        lines.append("worst divergences:")
        for d in result.worst:
            lines.append(
                f"  {d.trajectory} #{d.index} {d.tool} {json.dumps(d.arguments, ensure_ascii=False)[:120]}: {d.why}"
            )
            lines.append(f"    real:      {_excerpt(d.real).replace(chr(10), ' ')}")
            lines.append(f"    predicted: {_excerpt(d.predicted).replace(chr(10), ' ')}")
    return "\n".join(lines)
