"""A trajectory's report: a short text summary and a self-contained HTML page (inline SVG, no external assets), with
the robustness scorecard (aw_mcp/scorecard.py) of what the agent did about each fault."""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aw_mcp.records import CallRecord, FaultEntry, TrajectoryLine, read_lines
from aw_mcp.scorecard import (
    CHECKS,
    OUTCOMES,
    Reaction,
    Rules,
    Scorecard,
    fails_a_check,
    score,
    scorecard_text,
)

_OK, _ERROR, _FAULT = "#3b7dd8", "#d83b3b", "#e0a030"


@dataclass(frozen=True)
class FiredFault:
    """A fault entry with the call it fired on."""

    index: int
    tool: str
    entry: FaultEntry


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
    for call in calls:
        summary.per_tool[call.tool] += 1
        if call.is_error or call.error:
            summary.errors_per_tool[call.tool] += 1
        summary.faults += [FiredFault(call.index, call.tool, fault) for fault in call.faults]
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


def text_summary(summary: Summary, card: Scorecard | None = None) -> str:
    """The trajectory in a few lines; with faults fired, its robustness scorecard follows."""
    n = len(summary.calls)
    lat = summary.latencies
    lines = [
        f"{summary.path}: {n} call(s) in {len(summary.sessions)} session(s), {len(summary.per_tool)} tool(s), "
        f"{summary.errors} error(s)" + (f" ({summary.errors / n:.0%})" if n else ""),
    ]
    notices = Counter(c.notice for c in summary.calls if c.notice)
    for notice, count in notices.items():  # answers that are not the world model's (the demo backend)
        lines.append(f"NOTE: {count} call(s): {notice}")
    if n:
        lines.append(
            f"latency ms: p50 {percentile(lat, 0.5):.0f}, p95 {percentile(lat, 0.95):.0f}, max {max(lat):.0f}"
        )
        lines.append("calls per tool: " + ", ".join(f"{t} {c}" for t, c in summary.per_tool.most_common()))
    fired = summary.fired_by_name()
    applied = sum(a for _, a, _ in fired.values())
    lines.append(f"faults fired: {applied}" + (" (none)" if not fired else ""))
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
# SVG pictures
# ---------------------------------------------------------------------------------------------------------------


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(label)}">'
        + "".join(body)
        + "</svg>"
    )


def histogram_svg(latencies: list[float], bins: int = 20, width: int = 640, height: int = 220) -> str:
    """Calls per latency bin (linear bins from 0 to the slowest call)."""
    left, bottom, top = 40, 30, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    body = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    if not latencies:
        body.append(f'<text x="{left}" y="{height // 2}" font-size="12">no calls</text>')
        return _svg(width, height, body, "latency histogram (empty)")
    high = max(max(latencies), 1.0)
    counts = [0] * bins
    for value in latencies:
        counts[min(bins - 1, int(value / high * bins))] += 1
    peak = max(counts)
    bar_w = plot_w / bins
    for i, count in enumerate(counts):
        h = plot_h * count / peak
        x, y = left + i * bar_w, top + plot_h - h
        title = f"{high * i / bins:.0f}–{high * (i + 1) / bins:.0f} ms: {count} call(s)"
        body.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 1:.1f}" height="{h:.1f}" fill="{_OK}">'
            f"<title>{html.escape(title)}</title></rect>"
        )
    axis_y = top + plot_h
    body.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="#333"/>')
    body.append(f'<text x="{left}" y="{axis_y + 16}" font-size="11">0 ms</text>')
    body.append(
        f'<text x="{left + plot_w}" y="{axis_y + 16}" font-size="11" text-anchor="end">{high:.0f} ms</text>'
    )
    body.append(f'<text x="4" y="{top + 10}" font-size="11">{peak}</text>')
    return _svg(width, height, body, "latency histogram")


def timeline_svg(calls: list[CallRecord], width: int = 900) -> str:
    """One row per tool, one mark per call in call order: blue ok, red error, amber when a fault fired."""
    tools = list(dict.fromkeys(c.tool for c in calls))
    row_h, left, top = 22, 170, 10
    height = top + row_h * max(1, len(tools)) + 30
    plot_w = width - left - 10
    body = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    for r, tool in enumerate(tools):
        y = top + r * row_h + row_h / 2
        body.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{html.escape(tool)}</text>'
        )
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
    step = plot_w / max(1, len(calls))
    for i, call in enumerate(calls):
        fired = call.applied_faults()
        failed = bool(call.is_error or call.error)
        colour = _FAULT if fired else (_ERROR if failed else _OK)
        x = left + (i + 0.5) * step
        y = top + tools.index(call.tool) * row_h + row_h / 2
        title = f"call {call.index}: {call.tool} {call.latency_ms:.0f} ms"
        if fired:
            title += " — " + ", ".join(f"{f.name} ({f.kind})" for f in fired)
        if failed:
            title += " — error"
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{min(6.0, max(2.0, step / 2.5)):.1f}" fill="{colour}">'
            f"<title>{html.escape(title)}</title></circle>"
        )
    axis_y = top + row_h * max(1, len(tools)) + 14
    body.append(f'<text x="{left}" y="{axis_y}" font-size="11">first call</text>')
    body.append(f'<text x="{left + plot_w}" y="{axis_y}" font-size="11" text-anchor="end">last call</text>')
    return _svg(width, height, body, "timeline of calls")


# ---------------------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f4f4f4}code,pre{font-size:12px}pre{white-space:pre-wrap;background:#f8f8f8;padding:6px}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;border-radius:5px}
"""


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _judge_table(summary: Summary) -> str:
    if not summary.judgements:
        return "<p>Not judged (run <code>aw-mcp judge</code>).</p>"
    esc = html.escape
    rows = []
    for entry in summary.judgements:
        judgement = entry.get("judgement")
        if judgement is None:
            rows.append(
                [
                    esc(str(entry["session"])),
                    str(entry["index"] + 1),
                    esc(str(entry.get("tool"))),
                    "no scores",
                ]
                + [""] * 8
            )
            continue
        scores = judgement["scores"]
        rows.append(
            [
                esc(str(entry["session"])),
                str(entry["index"] + 1),
                esc(str(entry.get("tool"))),
                f"{judgement['score']:.1f}",
                f"{judgement['mean']:.2f}",
            ]
            + [str(scores.get(d, "")) for d in ("format", "factuality", "consistency", "realism", "quality")]
            + [esc(str(entry.get("against", ""))), esc("; ".join(judgement.get("weaknesses") or []))[:1000]]
        )
    sessions = [
        [esc(s), str(n), f"{(m - 1) / 4 * 100:.2f}", f"{m:.2f}"]
        for s, (n, m) in summary.judge_sessions().items()
    ]
    return _table(["session", "judged calls", "score (0-100)", "mean (1-5)"], sessions) + _table(
        [
            "session",
            "call",
            "tool",
            "score",
            "mean",
            "format",
            "factuality",
            "consistency",
            "realism",
            "quality",
            "against",
            "weaknesses",
        ],
        rows,
    )


def call_anchor(session: str, index: int) -> str:
    return f"call-{re.sub(r'[^A-Za-z0-9_-]', '_', session)}-{index}"


def _call_link(session: str, index: int, linked: bool) -> str:
    return f'<a href="#{call_anchor(session, index)}">{index}</a>' if linked else str(index)


def _calls_table(summary: Summary) -> str:
    """Every call with an anchor, so the scorecard's verdicts can point at the calls they rest on."""
    esc = html.escape
    rows = []
    for call in summary.calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False, default=str)
        seen = (call.observation or call.error or "").strip()
        outcome = "error" if call.is_error or call.error else "ok"
        rows.append(
            f'<tr id="{call_anchor(str(call.session), call.index)}">'
            + "".join(
                f"<td>{cell}</td>"
                for cell in (
                    esc(str(call.session)),
                    str(call.index),
                    esc(call.time),
                    esc(call.tool),
                    f"<code>{esc(arguments[:300])}</code>",
                    outcome,
                    esc(", ".join(f.name for f in call.applied_faults())),
                    f"{call.latency_ms:.0f}",
                    f"<code>{esc(seen[:200])}</code>",
                )
            )
            + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("session", "call", "time", "tool", "arguments", "result", "faults", "ms", "observation")
    )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


_FAULT_COLUMNS = ["session", "call", "tool", "perturbation", "kind"]


def scorecard_html(card: Scorecard, link_calls: bool = True) -> str:
    """A summary per category, then a table per category with one row per graded fault."""
    esc = html.escape
    if not card.reactions and not card.not_graded:
        return "<p>No fault fired, so there is nothing to grade.</p>"
    parts = []
    several = len(card.trajectories) > 1
    summary_rows = []
    for category, total in card.summary.items():
        summary_rows.append(
            [
                esc(category),
                str(total.total),
                "; ".join(f"{esc(o)} {total.outcomes[o]} ({total.rates[o]:.0%})" for o in OUTCOMES[category]),
            ]
        )
    parts.append(_table(["category", "graded", "outcomes"], summary_rows))
    failing = {name: count for name, count in card.checks.items() if count}
    if failing:
        parts.append(
            "<p>Checks that would fail <code>--fail-on</code>: "
            + ", ".join(f"<b>{esc(n)}</b> {c} ({esc(CHECKS[n].means)})" for n, c in failing.items())
            + "</p>"
        )
    for category in card.summary:
        rows = []
        for r in (r for r in card.reactions if r.category == category):
            rows.append(_reaction_row(r, link_calls and not several, several))
        header = (["trajectory"] if several else []) + [*_FAULT_COLUMNS, "outcome", "why", "later calls"]
        parts.append(f"<h3>{esc(category)}</h3>" + _table(header, rows))
    if card.not_graded:
        rows = [
            ([esc(n.trajectory)] if several else [])
            + [
                esc(n.session),
                _call_link(n.session, n.call, link_calls and not several),
                esc(n.tool),
                esc(n.fault),
                esc(n.kind),
                esc(n.reason),
            ]
            for n in card.not_graded
        ]
        header = (["trajectory"] if several else []) + [*_FAULT_COLUMNS, "why"]
        parts.append("<h3>Not graded</h3>" + _table(header, rows))
    return "\n".join(parts)


def _reaction_row(r: Reaction, linked: bool, several: bool) -> list[str]:
    esc = html.escape
    outcome = f'<b style="color:{_ERROR}">{esc(r.outcome)}</b>' if fails_a_check(r) else esc(r.outcome)
    return ([esc(r.trajectory)] if several else []) + [
        esc(r.session),
        _call_link(r.session, r.call, linked),
        esc(r.tool),
        esc(r.fault),
        esc(r.kind),
        outcome,
        esc(r.detail),
        ", ".join(_call_link(r.session, i, linked) for i in r.calls),
    ]


def aggregate_html(summaries: list[Summary], card: Scorecard) -> str:
    """Several trajectories: each one's summary, then the scorecard over all of them."""
    esc = html.escape
    body = [f"<h2>{esc(s.path)}</h2><pre>{esc(text_summary(s))}</pre>" for s in summaries]
    return _page(
        "aw-mcp scorecard: " + ", ".join(s.path for s in summaries),
        [
            "<h1>Robustness scorecard</h1>",
            f"<pre>{esc(scorecard_text(card))}</pre>",
            scorecard_html(card, link_calls=False),
            *body,
        ],
    )


def _page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
            *body,
            "</body></html>",
        ]
    )


def html_report(summary: Summary, card: Scorecard | None = None) -> str:
    card = card or scorecard_of([summary])
    esc = html.escape
    tool_rows = [
        [esc(tool), str(count), str(summary.errors_per_tool.get(tool, 0))]
        for tool, count in summary.per_tool.most_common()
    ]
    fired_rows = [
        [esc(name), esc(kind), str(applied), str(skipped)]
        for name, (kind, applied, skipped) in summary.fired_by_name().items()
    ]
    fault_rows = []
    for f in summary.faults:
        details = {k: v for k, v in f.entry.to_json().items() if k not in ("name", "kind", "ground_truth")}
        truth = f.entry.ground_truth
        fault_rows.append(
            [
                str(f.index),
                esc(f.tool),
                esc(f.entry.name),
                esc(f.entry.kind),
                f"<code>{esc(str(details))}</code>",
                f"<pre>{esc(str(truth)[:2000])}</pre>" if truth is not None else "",
            ]
        )
    legend = (
        f'<p class="legend"><span style="background:{_OK}"></span>ok'
        f'<span style="background:{_ERROR}"></span>error<span style="background:{_FAULT}"></span>fault fired</p>'
    )
    return _page(
        f"aw-mcp report: {summary.path}",
        [
            f"<h1>Trajectory report</h1><p><code>{esc(summary.path)}</code></p>",
            f"<pre>{esc(text_summary(summary, card))}</pre>",
            "<h2>Calls per tool</h2>",
            _table(["tool", "calls", "errors"], tool_rows),
            "<h2>Faults fired</h2>",
            _table(["perturbation", "kind", "applied", "without effect"], fired_rows)
            if fired_rows
            else "<p>No perturbation fired.</p>",
            "<h2>Latency</h2>",
            histogram_svg(summary.latencies),
            "<h2>Timeline</h2>",
            legend,
            timeline_svg(summary.calls),
            "<h2>Judge scores</h2>",
            _judge_table(summary),
            "<h2>Robustness scorecard</h2>",
            "<p>What the agent did about each fault that fired (rules: the README's robustness scorecard).</p>",
            scorecard_html(card),
            "<h2>Every fault</h2>",
            _table(["call", "tool", "perturbation", "kind", "details", "ground truth"], fault_rows)
            if fault_rows
            else "<p>None.</p>",
            "<h2>Calls</h2>",
            _calls_table(summary),
        ],
    )


def write_report(trajectory: str | Path, output: str | Path, rules: Rules | None = None) -> Summary:
    summary = summarize(trajectory)
    Path(output).write_text(html_report(summary, scorecard_of([summary], rules)), encoding="utf-8")
    return summary
