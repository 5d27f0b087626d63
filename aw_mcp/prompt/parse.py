"""Reading a model's reply: its thinking, the answer inside the trained frame, code fences, and JSON in prose.

One parser with two dialects:

- `LENIENT` (ours; the simulator, the benchmark runner): the world model's observation, recovered from whatever
  it wrote. Every `<think>...</think>` block is thinking; a stray `</think>` (the chat template opened the block in
  the prompt) makes everything before it thinking; an unclosed `<think>` is thinking up to the first answer tag or
  marker after it (the answer it still wrote is kept). The answer is the last `<predicted_observation>` block (to
  its close or the end), else what follows the last `Environment Observation:` marker (any of its spellings), else
  the whole rest; one code fence around all of it is unwrapped and blank lines at both ends are dropped, every
  other byte is kept (a listing's indentation, a prompt's trailing space).
- `EVAL_PY` (the judge protocol, judging.py): exactly what Qwen-AgentWorld's `eval/eval.py` hands its judge; its
  results are pinned byte for byte (tests/eval/test_judge_bench.py). Each `<think>` pairs with the next unpaired
  `</think>` (nested blocks merge), a stray `</think>` cuts everything before it, an unclosed `<think>` runs to the
  next `<predicted_observation>` (or the end); the text is stripped when anything was cut. The answer is the last
  `<predicted_observation>` block up to its close (or the end), stripped, else the whole rest stripped; code
  fences and the marker stay.

A reply that is not an observation (the judge's) loses its thinking by a third, simpler rule (`without_thinking`:
the judge has no answer tag or marker for an unclosed block to stop at).

Where thinking is split: an OpenAI-compatible server with a reasoning parser sends it apart
(`reasoning_content`); our local backend splits the engine's text the same way, with the engine's vLLM-compatible
parser (engine/reasoning.py, which stays in the engine: the engine serves without aw_mcp). `parse_answer` takes
that reasoning and also splits any thinking left in the text (a server without a reasoning parser), so the
simulator's split is the only one on the aw_mcp side.

JSON in prose, also two ways: `parse_json_observation` is strict (an observation is validated against its schema,
so nothing is repaired: the first value that decodes, from the whole text or one of its first few `{`/`[`);
`json_candidates` + `json_object` are forgiving (a judge's scores: every fenced block or balanced `{...}`, with
trailing commas, single-quoted and bare keys repaired).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from aw_mcp.prompt.frame import ANSWER_CLOSE, ANSWER_OPEN, OBSERVATION_MARKER, THINK_CLOSE, THINK_OPEN

Dialect = Literal["lenient", "eval.py"]
LENIENT: Dialect = "lenient"
EVAL_PY: Dialect = "eval.py"


@dataclass(frozen=True)
class ParsedAnswer:
    observation: str
    thinking: str
    # The answer was found in its frame: a `<predicted_observation>` tag (or, in the lenient dialect, a marker).
    # Not part of equality: two parses that read the same observation and thinking are the same answer.
    framed: bool = field(default=False, compare=False)


_I = re.IGNORECASE
_THINK_BLOCK = re.compile(rf"{re.escape(THINK_OPEN)}(.*?){re.escape(THINK_CLOSE)}", re.DOTALL | _I)
_THINK_TAG = re.compile(r"</?think>", _I)
_THINK_TO_END = re.compile(rf"{re.escape(THINK_OPEN)}.*?(?:{re.escape(THINK_CLOSE)}|\Z)", re.DOTALL | _I)
_THINK_OPEN = re.compile(re.escape(THINK_OPEN), _I)
_THINK_CLOSE = re.compile(re.escape(THINK_CLOSE), _I)
_ANSWER_OPEN = re.compile(re.escape(ANSWER_OPEN), _I)
_ANSWER_CLOSE = re.compile(re.escape(ANSWER_CLOSE), _I)
_PREDICTED = re.compile(rf"{re.escape(ANSWER_OPEN)}(.*?)(?:{re.escape(ANSWER_CLOSE)}|\Z)", re.DOTALL | _I)
# OBSERVATION_MARKER and the spellings models drift into: `Environment Observation:`, `## Environment
# Observation:`, `**Environment Observation**:`.
_MARKER = re.compile(r"(?:\*\*|##+\s*)?Environment Observation(?:\*\*)?\s*:(?:\*\*)?", _I)
_FENCE = re.compile(r"^```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)\n?```$", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


# ---------------------------------------------------------------------------------------------------------------
# Thinking
# ---------------------------------------------------------------------------------------------------------------


def split_thinking(text: str, dialect: Dialect = LENIENT) -> tuple[str, str]:
    """(the text without its thinking, the thinking), by the rules of `dialect` (see the module's doc)."""
    if dialect == EVAL_PY:
        return _eval_py_split(text, _ANSWER_OPEN)
    return _lenient_split(text)


def without_thinking(text: str) -> str:
    """A reply that is not an observation (the judge's) without its thinking: when no `<think>` comes before the
    last `</think>`, everything up to it (the template opened the block); then every `<think>` block, an unclosed
    one to the end (a judge has no answer tag to stop at)."""
    lower = text.lower()
    if THINK_CLOSE in lower and THINK_OPEN not in lower[: lower.rfind(THINK_CLOSE)]:
        text = text[lower.rfind(THINK_CLOSE) + len(THINK_CLOSE) :]
    return _THINK_TO_END.sub("", text)


def _lenient_split(text: str) -> tuple[str, str]:
    thoughts = [m.group(1).strip() for m in _THINK_BLOCK.finditer(text)]
    rest = _THINK_BLOCK.sub("", text)
    lower = rest.lower()
    if THINK_CLOSE in lower:
        # A stray close tag: the chat template opened <think> in the prompt, so all before it is thinking.
        cut = lower.rfind(THINK_CLOSE)
        thoughts.append(_THINK_TAG.sub("", rest[:cut]).strip())
        rest = rest[cut + len(THINK_CLOSE) :]
    elif THINK_OPEN in lower:
        # Unclosed: the model never finished thinking. Keep any answer it still wrote after a marker.
        start = lower.find(THINK_OPEN)
        tail = rest[start + len(THINK_OPEN) :]
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


def _eval_py_split(text: str, stop: re.Pattern[str]) -> tuple[str, str]:
    """eval.py's cut (see the module's doc); an unclosed `<think>` runs to the next match of `stop`, or the end."""
    tags = sorted(
        [(m.start(), m.end(), True) for m in _THINK_OPEN.finditer(text)]
        + [(m.start(), m.end(), False) for m in _THINK_CLOSE.finditer(text)]
    )
    if not tags:
        return text, ""
    paired: set[int] = set()
    cuts: list[tuple[int, int]] = []
    for i, (start, _, opens) in enumerate(tags):
        if not opens or i in paired:
            continue
        close = next((j for j in range(i + 1, len(tags)) if j not in paired and not tags[j][2]), None)
        if close is not None:
            paired |= {i, close}
            cuts.append((start, tags[close][1]))
    for i, (start, end, opens) in enumerate(tags):
        if i in paired:
            continue
        if not opens:
            cuts.append((0, end))
        else:
            answer = stop.search(text, start)
            cuts.append((start, answer.start() if answer else len(text)))
    kept, thoughts, position = [], [], 0
    for start, end in sorted(cuts):
        if start > position:
            kept.append(text[position:start])
        if end > position:
            thoughts.append(_THINK_TAG.sub("", text[max(start, position) : end]).strip())
        position = max(position, end)
    kept.append(text[position:])
    return "".join(kept).strip(), "\n\n".join(t for t in thoughts if t)


# ---------------------------------------------------------------------------------------------------------------
# The answer in its frame
# ---------------------------------------------------------------------------------------------------------------


def _trim_lines(text: str) -> str:
    """Drop blank lines at both ends; every other byte (indentation, a prompt's trailing space) stays."""
    if not text.strip():
        return ""
    text = re.sub(r"\A(?:[ \t]*\n)+", "", text)
    return re.sub(r"(?:\n[ \t]*)+\Z", "", text.rstrip("\n"))


def _trim(text: str) -> str:
    """An answer after its marker or tag: text on the marker's own line (`**Environment Observation:** ok`) loses
    the spaces before it; a block on the following lines keeps its indentation (a `view` listing starts with
    spaces)."""
    first, newline, rest = text.partition("\n")
    return _trim_lines(first.lstrip(" \t") + newline + rest if first.strip() else rest)


def strip_code_fence(text: str) -> str:
    """Unwrap one code fence that encloses the whole text (models like to fence JSON and screens)."""
    trimmed = _trim(text)
    match = _FENCE.match(trimmed)
    return _trim_lines(match.group(2)) if match else trimmed


def parse_answer(text: str, reasoning: str = "", *, dialect: Dialect = LENIENT) -> ParsedAnswer:
    """The observation in a reply and its thinking (`reasoning`, as a server sent it apart, first)."""
    rest, thinking = split_thinking(text or "", dialect)
    thinking = "\n\n".join(t for t in (reasoning.strip(), thinking) if t)
    if dialect == EVAL_PY:
        opens = list(_ANSWER_OPEN.finditer(rest))
        if not opens:
            return ParsedAnswer(rest.strip(), thinking)
        body = rest[opens[-1].end() :]
        close = _ANSWER_CLOSE.search(body)
        return ParsedAnswer((body[: close.start()] if close else body).strip(), thinking, framed=True)
    predicted = list(_PREDICTED.finditer(rest))
    if predicted:
        body = predicted[-1].group(1)  # the last block is the answer (as the official parser reads it)
    else:
        markers = list(_MARKER.finditer(rest))
        body = rest[markers[-1].end() :] if markers else rest
    body = body.replace(ANSWER_CLOSE, "")
    framed = bool(predicted) or bool(_MARKER.search(rest))
    return ParsedAnswer(observation=strip_code_fence(body), thinking=thinking, framed=framed)


def strip_marker(text: str) -> str:
    """The text without the `**Environment Observation:**` marker, as eval.py cleans both sides of a judged turn:
    cut when the (unstripped) text starts with it, else every occurrence removed; stripped either way."""
    if text.startswith(OBSERVATION_MARKER):
        return text[len(OBSERVATION_MARKER) :].strip()
    return text.replace(OBSERVATION_MARKER, "").strip()


# ---------------------------------------------------------------------------------------------------------------
# JSON in prose
# ---------------------------------------------------------------------------------------------------------------

_JSON_START = re.compile(r"[{\[]")
MAX_JSON_STARTS = 32


def parse_json_observation(observation: str) -> Any:
    """The observation as JSON; tolerates fences and prose around one JSON value. Raises ValueError."""
    text = strip_code_fence(observation)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    # Prose around the JSON: try decoding from the first few `{` / `[` only, without copying the text, so a long
    # non-JSON answer costs a bounded number of scans instead of one per bracket (quadratic).
    decoder = json.JSONDecoder()
    starts = (m.start() for m in _JSON_START.finditer(text))
    for start in itertools.islice(starts, MAX_JSON_STARTS):
        try:
            value, _ = decoder.raw_decode(text, start)
            return value
        except (json.JSONDecodeError, RecursionError):
            continue
    raise ValueError("the observation is not JSON")


def object_spans(text: str) -> list[str]:
    """Every balanced {...} span, outermost first, in order (strings and escapes respected)."""
    found, depth, start, in_string, escaped = [], 0, -1, False, False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"' and depth:
            in_string = True
        elif char == "{":
            if depth == 0:
                start = i
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                found.append(text[start : i + 1])
    return found


def json_candidates(text: str) -> list[str]:
    """Where an object may hide in prose, in order: each code fence (plain or `json`) that holds one, then every
    balanced `{...}`."""
    return [m for m in _FENCED.findall(text) if m.lstrip().startswith("{")] + object_spans(text)


def repair_json(candidate: str) -> str:
    """Near-JSON made JSON: trailing commas dropped, single-quoted and bare keys double-quoted."""
    candidate = re.sub(r",(\s*[}\]])", r"\1", candidate)  # trailing commas
    candidate = re.sub(r"'(\w+)'(\s*:)", r'"\1"\2', candidate)  # single-quoted keys
    return re.sub(r"([{,]\s*)([A-Za-z_]\w*)(\s*:)", r'\1"\2"\3', candidate)  # bare keys


def json_object(candidate: str, *, repair: bool = True) -> dict[str, Any] | None:
    """The object `candidate` holds, as is or (`repair`) once repaired; None when neither is a JSON object."""
    for text in (candidate, repair_json(candidate)) if repair else (candidate,):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None
