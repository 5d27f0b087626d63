"""A trajectory's report: a short text summary and a self-contained HTML page (inline SVG, no external assets), with
the robustness scorecard (aw_mcp/eval/scorecard.py) of what the agent did about each fault.

The page is rendered by Jinja2 from report_templates/report.html.j2 with autoescaping on, so everything a trajectory
holds (arguments, observations, names the world file chose) is escaped by the template engine, never by hand. This
module computes what is shown (figures, chart geometry, cut texts); the template only lays it out.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aw_mcp.core.private_files import write_private_text
from aw_mcp.eval.calibration import calibrate
from aw_mcp.eval.scorecard import (
    CHECKS,
    OUTCOMES,
    Reaction,
    Rules,
    Scorecard,
    SessionNode,
    fails_a_check,
    fork_families,
    score,
    scorecard_text,
    walk,
)
from aw_mcp.trajectory.records import CallRecord, FaultEntry, TrajectoryLine, read_lines, with_shadows

if TYPE_CHECKING:
    import jinja2
    from markupsafe import Markup


# Blue: ok; red: an error (whatever caused it, an injected 503 too); a fault that fired rings the mark in amber.
COLOURS = {"ok": "#3b7dd8", "error": "#d83b3b", "fault": "#e08a00", "pass": "#2e7d32"}
# One colour per --fail-on check, so each bad outcome reads as itself (a followed injection is not a repeated 4xx):
# the banner, the scorecard's outcome cells and the timeline's marks use the same one (Okabe-Ito and Tol hues).
CHECK_COLOURS = {
    "followed-injection": "#9c27b0",
    "ignored-retry-after": "#0072b2",
    "futile-retry": "#8c510a",
    "gave-up": "#cc79a7",
    "repeated-error": "#e65100",
    "called-removed-tool": "#009e73",
    "not-relisted": "#56b4e9",
    "not-rechecked": "#7b6d00",
    "unknown-injection": "#757575",
}


def failed_check(reaction: Reaction) -> str | None:
    """The first --fail-on check this reaction fails (its colour and label in the report), or None."""
    return next((name for name, check in CHECKS.items() if check.fails(reaction)), None)


@dataclass(frozen=True)
class CheckRow:
    """One --fail-on check as the report's banner shows it."""

    name: str
    means: str
    colour: str
    asked: bool  # named in --fail-on
    calls: list[tuple[str, int]]  # (session, call) of each reaction failing it

    @property
    def failed(self) -> bool:
        return bool(self.calls)


@dataclass(frozen=True)
class Verdict:
    """What the report leads with: the world and date, and every check with its result (the --fail-on ones first)."""

    world: str
    date: str
    calls: int
    errors: int
    faults: int
    graded: int
    rows: list[CheckRow]
    asked: list[str]

    @property
    def failing(self) -> list[CheckRow]:
        return [row for row in self.rows if row.failed and (row.asked or not self.asked)]

    @property
    def passed(self) -> bool:
        return not self.failing

    @property
    def headline(self) -> str:
        if not self.faults:
            return "no fault fired: nothing to grade"
        if self.asked:
            failed = [row.name for row in self.failing]
            if failed:
                return f"FAIL: {len(failed)} of {len(self.asked)} --fail-on check(s) failed ({', '.join(failed)})"
            return f"PASS: all {len(self.asked)} --fail-on check(s) passed"
        failing = self.failing
        if failing:
            return f"{len(failing)} check(s) would fail --fail-on: {', '.join(row.name for row in failing)}"
        return "no check would fail --fail-on"


def world_names(calls: list[CallRecord]) -> str:
    names = list(dict.fromkeys(c.world for c in calls if c.world))
    return ", ".join(names) if names else "unknown world"


def verdict(summary: Summary, card: Scorecard, asked: Iterable[str] = ()) -> Verdict:
    asked = list(asked)
    rows = []
    for name in [*asked, *(n for n in CHECKS if n not in asked)]:
        check = CHECKS[name]
        calls = [(r.session, r.call) for r in card.reactions if check.fails(r)]
        rows.append(
            CheckRow(name, check.means, CHECK_COLOURS.get(name, COLOURS["error"]), name in asked, calls)
        )
    first = min((c.time for c in summary.calls if c.time), default="")
    return Verdict(
        world=world_names(summary.calls),
        date=first[:10] or "no calls",
        calls=len(summary.calls),
        errors=summary.errors,
        faults=len(summary.faults),
        graded=len(card.reactions),
        rows=rows,
        asked=asked,
    )


@dataclass(frozen=True)
class FiredFault:
    """A fault entry with the call it fired on."""

    index: int
    tool: str
    entry: FaultEntry
    session: str = "default"


@dataclass
class Summary:
    path: str
    calls: list[CallRecord]
    sessions: list[str]
    per_tool: Counter[str] = field(default_factory=Counter)
    errors_per_tool: Counter[str] = field(default_factory=Counter)
    faults: list[FiredFault] = field(default_factory=list)
    judgements: list[dict[str, Any]] = field(
        default_factory=list
    )  # `aw-mcp judge` results, one per judged call
    lines: list[TrajectoryLine] = field(default_factory=list)  # calls and tools/list lines, in file order
    warnings: list[str] = field(default_factory=list)  # lines left out (a torn last line)
    families: list[SessionNode] = field(
        default_factory=list
    )  # sessions as fork trees (scorecard.fork_families)

    @property
    def forked(self) -> bool:
        return any(node.children for node in self.families)

    def judge_sessions(self) -> dict[str, tuple[int, float]]:
        """session -> (judged calls, mean 1-5 score) over the calls the judge scored."""
        by_session: dict[str, list[float]] = {}
        for entry in self.judgements:
            if entry.get("judgement"):
                by_session.setdefault(str(entry["session"]), []).append(float(entry["judgement"]["mean"]))
        return {s: (len(v), sum(v) / len(v)) for s, v in by_session.items()}

    @property
    def latencies(self) -> list[float]:
        return [c.latency_ms for c in self.calls]

    @property
    def errors(self) -> int:
        return sum(self.errors_per_tool.values())

    def fired_by_name(self) -> dict[str, tuple[str, int, int]]:
        """name → (kind, applied count, not-applied count), in first-fired order."""
        out: dict[str, list[Any]] = {}
        for f in self.faults:
            row = out.setdefault(f.entry.name, [f.entry.kind, 0, 0])
            row[1 if f.entry.applied else 2] += 1
        return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def judge_path(trajectory: str | Path) -> Path:
    """Where `aw-mcp judge` keeps a trajectory's scores."""
    return Path(trajectory).with_suffix(".judge.jsonl")


def read_judgements(trajectory: str | Path) -> list[dict[str, Any]]:
    """The latest judge result per call (a rerun appends); lines cut short by a crash are skipped."""
    path = judge_path(trajectory)
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                latest[(str(entry["session"]), int(entry["index"]))] = entry
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
    return [latest[k] for k in sorted(latest)]


def summarize(path: str | Path) -> Summary:
    warnings: list[str] = []
    lines = list(read_lines(path, warnings))
    calls = [line for line in lines if isinstance(line, CallRecord)]
    summary = Summary(
        str(path), calls, sorted({str(c.session) for c in calls}), lines=lines, warnings=warnings
    )
    summary.judgements = read_judgements(path)
    summary.families = fork_families(lines)
    for call in calls:
        summary.per_tool[call.tool] += 1
        if call.is_error or call.error:
            summary.errors_per_tool[call.tool] += 1
        session = call.session or "default"
        summary.faults += [FiredFault(call.index, call.tool, fault, session) for fault in call.faults]
    return summary


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def scorecard_of(summaries: list[Summary], rules: Rules | None = None) -> Scorecard:
    warnings = [w for s in summaries for w in s.warnings]
    return score([(s.path, s.lines) for s in summaries], rules, warnings)


def faults_fired_text(fired: int, without_effect: int) -> str:
    """How many faults fired, counted one way everywhere (the text summary, `aw-mcp demo`'s world://faults line):
    every firing, with those that had no effect (another fault already answered the call) said apart."""
    if not fired:
        return "faults fired: 0 (none)"
    if not without_effect:
        return f"faults fired: {fired}"
    return f"faults fired: {fired} ({fired - without_effect} applied, {without_effect} without effect)"


def family_lines(families: Iterable[SessionNode]) -> list[str]:
    """One line per fork family that has forks: the root, then each fork and where it forked."""
    lines = []
    for root in families:
        if not root.children:
            continue
        forks = [
            f"{node.session} (forked from {node.forked_from.session} at call {node.forked_from.call})"
            for node in walk(root.children)
            if node.forked_from is not None
        ]
        lines.append(f"fork family of session {root.session}: " + ", ".join(forks))
    return lines


def consistency_scores(calls: list[CallRecord]) -> dict[str, tuple[int, int]]:
    """Per session: (answers the consistency guard checked, those that contradicted what the session established).
    Checked: every call with an answer of the world model or a recording (not a failure, not a real server's)."""
    scores: dict[str, list[int]] = {}
    for call in calls:
        if call.error is not None or call.observation is None or call.answered_by == "upstream":
            continue
        score = scores.setdefault(call.session or "default", [0, 0])
        score[0] += 1
        score[1] += bool(call.consistency and call.consistency.contradictions)
    return {session: (checked, bad) for session, (checked, bad) in scores.items()}


def consistency_lines(calls: list[CallRecord]) -> list[str]:
    """The consistency score per session and each contradiction, when the guard found or redrew anything."""
    if not any(call.consistency for call in calls):
        return []
    lines = [
        f"consistency, session {session}: {1 - bad / checked:.0%} ({bad} of {checked} answer(s) contradicted what "
        "the session established)"
        for session, (checked, bad) in consistency_scores(calls).items()
        if checked
    ]
    for call in calls:
        verdict = call.consistency
        if verdict is None:
            continue
        redrawn = f" (answer {verdict.kept} of {verdict.drawn} kept)" if verdict.drawn > 1 else ""
        for found in verdict.contradictions:
            lines.append(f"  call {call.index} {call.tool} [{found.rule}]: {found.message}{redrawn}")
        if not verdict.contradictions:
            lines.append(
                f"  call {call.index} {call.tool}: resampled, consistent answer {verdict.kept} of {verdict.drawn} kept"
            )
    return lines


def text_summary(summary: Summary, card: Scorecard | None = None) -> str:
    """The trajectory in a few lines; with faults fired, its robustness scorecard follows."""
    n = len(summary.calls)
    lat = summary.latencies
    lines = [
        f"{summary.path}: {n} call(s) in {len(summary.sessions)} session(s), {len(summary.per_tool)} tool(s), "
        f"{summary.errors} error(s)" + (f" ({summary.errors / n:.0%})" if n else ""),
    ]
    lines += family_lines(summary.families)
    notices = Counter(c.notice for c in summary.calls if c.notice)
    for notice, count in notices.items():  # answers that are not the world model's (the demo backend)
        lines.append(f"NOTE: {count} call(s): {notice}")
    sources = Counter(c.answered_by for c in summary.calls if c.observation is not None)
    if set(sources) - {"model"}:  # a hybrid, mirrored or cached run: how many answers came from where
        lines.append("answered by: " + ", ".join(f"{who} {count}" for who, count in sources.most_common()))
    lines += consistency_lines(summary.calls)
    if n:
        lines.append(
            f"latency ms: p50 {percentile(lat, 0.5):.0f}, p95 {percentile(lat, 0.95):.0f}, max {max(lat):.0f}"
        )
        lines.append("calls per tool: " + ", ".join(f"{t} {c}" for t, c in summary.per_tool.most_common()))
    fired = summary.fired_by_name()
    lines.append(faults_fired_text(len(summary.faults), sum(s for _, _, s in fired.values())))
    for name, (kind, count, skipped) in fired.items():
        extra = f", {skipped} without effect" if skipped else ""
        lines.append(f"  {name} [{kind}]: {count}{extra}")
    for session, (count, mean) in summary.judge_sessions().items():
        points = (mean - 1) / 4 * 100
        lines.append(
            f"judge, session {session}: {points:.2f} / 100 (mean {mean:.2f} of 5 over {count} call(s))"
        )
    if summary.faults:
        lines.append(scorecard_text(card or scorecard_of([summary])))
    else:
        lines += [f"WARNING: {w}" for w in summary.warnings]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# what the page shows: chart geometry and cut texts (the template lays them out)
# ---------------------------------------------------------------------------------------------------------------

OBSERVATION_CHARS = 200  # longer observations show this much in the Calls table and open in full
ARGUMENT_CHARS = 300


def nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2 or 5 times a power of ten) that cuts `span` into at most about `ticks` parts."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw * (1 - 1e-9))


def tick_label(value: float) -> str:
    return f"{round(value, 6):g}"


def cut(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters at a word boundary, with an ellipsis; whole when it fits."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = max(head.rfind(" "), head.rfind("\n"))
    if space >= limit // 2:
        head = head[:space]
    return head.rstrip() + "…"


@dataclass(frozen=True)
class Tick:
    at: float  # pixel position along its axis
    label: str


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass
class Histogram:
    width: int
    height: int
    left: int
    top: int
    plot_w: int
    plot_h: int
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    empty: bool = False

    @property
    def bottom(self) -> int:
        return self.top + self.plot_h

    @property
    def right(self) -> int:
        return self.left + self.plot_w


def histogram(latencies: list[float], bins: int = 20, width: int = 640, height: int = 240) -> Histogram:
    """Calls per latency bin: linear bins from 0 to a round value past the slowest call, round ticks on both axes
    (calls are counted in whole numbers)."""
    left, right, top, bottom = 60, 16, 12, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    chart = Histogram(width, height, left, top, plot_w, plot_h, [], [], [], empty=not latencies)
    if not latencies:
        return chart
    slowest = max(max(latencies), 1.0)
    x_step = nice_step(slowest)
    x_max = x_step * math.ceil(slowest / x_step - 1e-9)
    counts = [0] * bins
    for value in latencies:
        counts[min(bins - 1, int(value / x_max * bins))] += 1
    y_step = max(1, int(nice_step(max(counts))))
    y_max = y_step * math.ceil(max(counts) / y_step)
    bar_w = plot_w / bins
    for i, count in enumerate(counts):
        h = plot_h * count / y_max
        low, high = x_max * i / bins, x_max * (i + 1) / bins
        title = f"{tick_label(round(low, 3))}–{tick_label(round(high, 3))} ms: {count} call(s)"
        chart.bars.append(Bar(left + i * bar_w, top + plot_h - h, max(bar_w - 1, 0.5), h, title))
    chart.x_ticks = [
        Tick(left + plot_w * k * x_step / x_max, tick_label(k * x_step))
        for k in range(round(x_max / x_step) + 1)
    ]
    chart.y_ticks = [
        Tick(top + plot_h - plot_h * k * y_step / y_max, str(k * y_step)) for k in range(y_max // y_step + 1)
    ]
    return chart


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    r: float
    outcome: str  # ok | error | the name of the --fail-on check the call failed (its colour)
    fault: bool  # a fault fired on this call (the amber ring)
    title: str


@dataclass(frozen=True)
class LegendEntry:
    colour: str
    label: str
    ring: bool = False


@dataclass
class Timeline:
    width: int
    height: int
    left: int
    plot_w: int
    rows: list[tuple[str, float]]  # tool, y
    marks: list[Mark]
    axis_y: float
    ticks: list[Tick]  # seconds since the first call
    legend: list[LegendEntry]


def _seconds(time: str) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(time.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def timeline(calls: list[CallRecord], width: int = 900, card: Scorecard | None = None) -> Timeline:
    """One row per tool, one mark per call at the time it was made (seconds since the first call, on the axis):
    blue ok, red error (an injected 503 is an error too), or the colour of the --fail-on check the call failed
    (the later call a verdict rests on: the followed injection, the repeated 4xx, ...), ringed in amber when a fault
    fired on it. Calls without a readable time are placed in call order."""
    tools = list(dict.fromkeys(c.tool for c in calls))
    row_h, left, top = 24, 170, 10
    height = top + row_h * max(1, len(tools)) + 48
    plot_w = width - left - 16
    offending: dict[tuple[str, int], str] = {}
    for reaction in card.reactions if card is not None else []:
        name = failed_check(reaction)
        if name is not None:
            for index in reaction.calls[:1] or [reaction.call]:
                offending.setdefault((reaction.session, index), name)
    stamps = [_seconds(c.time) for c in calls]
    known = [t for t in stamps if t is not None]
    start = min(known) if known else 0.0
    span = max((max(known) - start) if known else 0.0, 1e-3)
    step = nice_step(span)
    axis_max = step * math.ceil(span / step - 1e-9)
    pad = min(6.0, plot_w / max(1, len(calls)) / 2)
    marks = []
    for i, call in enumerate(calls):
        fired = call.applied_faults()
        failed = bool(call.is_error or call.error)
        check = offending.get((call.session or "default", call.index))
        if stamps[i] is not None and len(known) == len(calls):
            x = left + pad + (plot_w - 2 * pad) * (stamps[i] - start) / axis_max
        else:
            x = left + (i + 0.5) * plot_w / max(1, len(calls))
        at = f"{stamps[i] - start:.1f} s" if stamps[i] is not None else "time unknown"
        title = (
            f"call {call.index}: {call.tool} at {at}, {call.latency_ms:.0f} ms, {'error' if failed else 'ok'}"
        )
        if call.session and len({c.session for c in calls}) > 1:
            title = f"session {call.session}, {title}"
        if fired:
            title += "; fault: " + ", ".join(f"{f.name} ({f.kind})" for f in fired)
        if check:
            title += f"; check failed: {check}"
        marks.append(
            Mark(
                x=x,
                y=top + tools.index(call.tool) * row_h + row_h / 2,
                r=min(6.0, max(2.5, plot_w / max(1, len(calls)) / 2.5)),
                outcome=check or ("error" if failed else "ok"),
                fault=bool(fired),
                title=title,
            )
        )
    rows = [(tool, top + r * row_h + row_h / 2) for r, tool in enumerate(tools)]
    axis_y = top + row_h * max(1, len(tools)) + 4
    ticks = [
        Tick(left + pad + (plot_w - 2 * pad) * k * step / axis_max, tick_label(k * step))
        for k in range(round(axis_max / step) + 1)
    ]
    kinds = {m.outcome for m in marks}
    legend = [LegendEntry(COLOURS["ok"], "ok"), LegendEntry(COLOURS["error"], "error (an injected one too)")]
    legend += [LegendEntry(CHECK_COLOURS[name], f"failed {name}") for name in CHECK_COLOURS if name in kinds]
    if any(m.fault for m in marks):
        legend.append(LegendEntry(COLOURS["fault"], "amber ring: a fault fired on the call", ring=True))
    return Timeline(width, height, left, plot_w, rows, marks, axis_y, ticks, legend)


def fault_details(entry: FaultEntry) -> list[tuple[str, str]]:
    """A fault entry's fields for a person: `applied: no`, `status: 503`, nested values as compact JSON."""
    out = []
    for key, value in entry.to_json().items():
        if key in ("name", "kind", "ground_truth"):
            continue
        if isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, str):
            text = value
        else:
            text = json.dumps(value, ensure_ascii=False, default=str)
        out.append((key, text))
    return out


def call_anchor(session: str, index: int) -> str:
    return f"call-{re.sub(r'[^A-Za-z0-9_-]', '_', session)}-{index}"


# ---------------------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------------------

_TEMPLATES = Path(__file__).resolve().parent / "report_templates"


@cache
def _environment() -> jinja2.Environment:
    import jinja2  # on first use: every command imports this module, and only the HTML needs Jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,  # every value is escaped unless the template marks it safe
        undefined=jinja2.StrictUndefined,  # a misspelt name is an error, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["cut"] = cut
    env.filters["oneline"] = lambda text: " ".join(str(text).split())
    env.filters["clock"] = lambda time: time.partition("T")[2].rstrip("Z") or time  # the date is in the title
    env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False, default=str)
    env.globals.update(
        anchor=call_anchor,
        colours={**COLOURS, **CHECK_COLOURS},
        failed_check=failed_check,
        checks=CHECKS,
        outcomes=OUTCOMES,
        fails_a_check=fails_a_check,
        fault_details=fault_details,
        OBSERVATION_CHARS=OBSERVATION_CHARS,
        ARGUMENT_CHARS=ARGUMENT_CHARS,
    )
    return env


def _macros() -> Any:
    return _environment().get_template("macros.html.j2").module


def histogram_svg(latencies: list[float], bins: int = 20, width: int = 640, height: int = 240) -> Markup:
    """The latency histogram as inline SVG."""
    return _macros().histogram_svg(histogram(latencies, bins, width, height))


def timeline_svg(calls: list[CallRecord], width: int = 900, card: Scorecard | None = None) -> Markup:
    """The timeline of calls as inline SVG."""
    return _macros().timeline_svg(timeline(calls, width, card))


def html_report(summary: Summary, card: Scorecard | None = None, checks: Iterable[str] = ()) -> str:
    """The page leads with its verdict (world, date, every check and its result, the `checks` asked for with
    --fail-on first), then the scorecard, the timeline and the latency; sections with nothing to show are left
    out. Call numbers are the trajectory's `index` everywhere (the first call is call 0)."""
    card = card or scorecard_of([summary])
    judged = verdict(summary, card, checks)
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=f"{judged.world}, {judged.date}: aw-mcp report ({Path(summary.path).name})",
            verdict=judged,
            summary=summary,
            card=card,
            text=text_summary(summary, card),
            histogram=histogram(summary.latencies),
            timeline=timeline(summary.calls, card=card),
            # shadow predictions (aw-mcp mirror --shadow) against the real answers: aw-mcp calibrate's figures
            calibration=calibrate([(summary.path, with_shadows(summary.lines))]),
            # what most calls' answers are labelled with (the demo backend's notice): said once above the Calls table,
            # and on a row only when that call's differs (a demo answer replayed for other arguments)
            common_notice=Counter(c.notice for c in summary.calls if c.notice).most_common(1)[0][0]
            if any(c.notice for c in summary.calls)
            else None,
        )
    )


def aggregate_html(summaries: list[Summary], card: Scorecard) -> str:
    """Several trajectories: the scorecard over all of them, then each one's summary."""
    return (
        _environment()
        .get_template("aggregate.html.j2")
        .render(
            summaries=[(s, text_summary(s)) for s in summaries],
            card=card,
            card_text=scorecard_text(card),
            title="aw-mcp scorecard: " + ", ".join(s.path for s in summaries),
        )
    )


def write_report(
    trajectory: str | Path, output: str | Path, rules: Rules | None = None, checks: Iterable[str] = ()
) -> Summary:
    summary = summarize(trajectory)
    page = html_report(summary, scorecard_of([summary], rules), checks)
    write_private_text(output, page)  # it quotes calls: 0600
    return summary
