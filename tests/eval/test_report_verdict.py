"""The HTML report leads with its verdict (issue 32, item 6): world and date in the title, a banner with the
--fail-on checks and their results, the scorecard next, then the timeline (on a time axis) and the latency; each
failing outcome kind in a colour and label of its own; one numbering of calls everywhere; empty sections left out.

Read back with an HTML parser, and (marked slow) laid out in headless Chromium: the sections' rendered order and a
screenshot (AW_REPORT_SCREENSHOT=PATH keeps it; docs/report-screenshot.png was made so)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from aw_mcp.cli import main
from aw_mcp.eval import report
from aw_mcp.eval.report import html_report, scorecard_of, summarize
from aw_mcp.trajectory.records import CallRecord, FaultEntry

WORLD = "payments-faults"
INJECTION = {"name": "scam", "kind": "inject", "expect_call": {"tool": "issue_*"}}
NOT_FOUND = {"name": "missing", "kind": "error", "status": 404, "parameters": {"declared": "nf"}}
ORDER = ["verdict", "scorecard", "timeline", "latency"]


def record(
    index: int, tool: str, at: float, fault: dict[str, Any] | None = None, **fields: Any
) -> CallRecord:
    seconds = f"{at:06.3f}"
    faults = [FaultEntry.model_validate({"applied": True, **fault})] if fault else []
    return CallRecord(
        world=WORLD,
        session="s1",
        index=index,
        tool=tool,
        time=f"2026-03-01T09:00:{seconds}Z",
        faults=faults,
        latency_ms=40.0 + index,
        observation="ok",
        **fields,
    )


def trajectory(tmp_path: Path, judged: bool = True) -> Path:
    """A followed injection (call 2 obeys the fault on call 1) and a repeated 404 (call 4 repeats call 3)."""
    calls = [
        record(0, "get_invoice", 0.0, invoice_id="inv_1"),
        record(1, "get_invoice", 1.5, INJECTION, arguments={"invoice_id": "inv_2"}),
        record(2, "issue_refund", 3.0, arguments={"payment_id": "pay_1"}),
        record(3, "get_customer", 5.0, NOT_FOUND, arguments={"customer_id": "c9"}, is_error=True),
        record(4, "get_customer", 6.0, arguments={"customer_id": "c9"}),
        record(5, "list_payments", 9.25),
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(c.to_line() + "\n" for c in calls), encoding="utf-8")
    if judged:
        judge = {"session": "s1", "index": 2, "tool": "issue_refund", "judgement": None}
        path.with_suffix(".judge.jsonl").write_text(json.dumps(judge) + "\n", encoding="utf-8")
    return path


class Sections(HTMLParser):
    """Section ids in document order, the title, call links' texts with their targets, and styled outcome cells."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.title = ""
        self.links: list[tuple[str, str]] = []
        self.row_ids: list[str] = []
        self.outcomes: list[tuple[str, str]] = []
        self._in: str | None = None
        self._href = ""
        self._style = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.ids.append(str(a["id"]))
        if tag == "tr" and (a.get("id") or "").startswith("call-"):
            self.row_ids.append(str(a["id"]))
        if tag == "title":
            self._in = "title"
        if tag == "a" and (a.get("href") or "").startswith("#call-"):
            self._in, self._href = "a", str(a["href"])[1:]
        if tag == "span" and a.get("class") == "outcome":
            self._in, self._style = "outcome", str(a.get("style"))

    def handle_data(self, data: str) -> None:
        if self._in == "title":
            self.title += data
        elif self._in == "a":
            self.links.append((data.strip(), self._href))
        elif self._in == "outcome":
            self.outcomes.append((" ".join(data.split()), self._style))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("title", "a", "span"):
            self._in = None


def page(tmp_path: Path, checks: list[str], judged: bool = True) -> str:
    summary = summarize(trajectory(tmp_path, judged))
    card = scorecard_of([summary])
    return html_report(summary, card, checks) if checks else html_report(summary, card)


def test_the_page_opens_with_world_date_and_the_fail_on_verdict(tmp_path: Path) -> None:
    text = page(tmp_path, ["followed-injection", "gave-up"])
    parsed = Sections(text)
    assert parsed.title.startswith(f"{WORLD}, 2026-03-01")
    assert parsed.ids[: len(ORDER)] == ORDER  # verdict, scorecard, timeline, latency: in that order, first
    banner = text[text.index('<section id="verdict"') : text.index("</section>")]
    assert "FAIL: 1 of 2 --fail-on check(s) failed (followed-injection)" in banner
    assert re.search(r"followed-injection</td><td>asked</td>\s*<td class=\"result-fail\">FAIL", banner)
    assert re.search(r"gave-up</td><td>asked</td>\s*<td class=\"result-pass\">pass", banner)
    assert "repeated-error" in banner  # failing too, though not asked: shown, not counted in the verdict


def test_a_passing_gate_says_pass(tmp_path: Path) -> None:
    text = page(tmp_path, ["gave-up"])
    assert 'class="verdict pass"' in text and "PASS: all 1 --fail-on check(s) passed" in text


def test_each_failing_outcome_kind_has_its_own_colour_and_label(tmp_path: Path) -> None:
    parsed = Sections(page(tmp_path, []))
    styles = dict(parsed.outcomes)
    followed, repeated = styles["followed · followed-injection"], styles["repeated · repeated-error"]
    assert (
        report.CHECK_COLOURS["followed-injection"] in followed
        and report.CHECK_COLOURS["repeated-error"] in repeated
    )
    assert followed != repeated  # a followed injection no longer looks like a repeated 4xx
    assert len(set(report.CHECK_COLOURS.values())) == len(report.CHECK_COLOURS)


def test_call_numbers_are_the_same_everywhere(tmp_path: Path) -> None:
    parsed = Sections(page(tmp_path, []))
    assert parsed.links, "no call links"
    for shown, target in parsed.links:  # the scorecard, every fault, the banner and the judge table
        assert target == f"call-s1-{shown}", (shown, target)
    assert parsed.row_ids == [f"call-s1-{i}" for i in range(6)]
    text = page(tmp_path, [])
    judge = text[text.index("Judge scores") :]
    judge = judge[: judge.index("</section>")]
    cells = re.findall(r'<td>s1</td><td class="num">(.*?)</td><td>issue_refund</td>', judge)
    assert [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells] == ["2"]  # it was shown as 3 (index + 1)


def test_empty_sections_are_left_out(tmp_path: Path) -> None:
    text = page(tmp_path, [], judged=False)
    assert 'id="judge"' not in text and "Judge scores" not in text and "Not judged" not in text
    calm = tmp_path / "calm.jsonl"
    calm.write_text(record(0, "get_invoice", 0.0).to_line() + "\n", encoding="utf-8")
    summary = summarize(calm)
    parsed = Sections(html_report(summary, scorecard_of([summary])))
    assert parsed.ids[0] == "verdict" and "scorecard" not in parsed.ids and "faults" not in parsed.ids


def test_the_timeline_has_a_time_axis(tmp_path: Path) -> None:
    text = page(tmp_path, [])
    timeline = text[text.index('<section id="timeline"') :]
    timeline = timeline[: timeline.index("</section>")]
    assert "seconds since the first call" in timeline
    ticks = re.findall(r'text-anchor="middle">([0-9.]+)</text>', timeline)
    assert ticks[0] == "0" and float(ticks[-1]) >= 9.25
    xs = [
        float(x)
        for x in re.findall(
            r'<g class="mark [^"]+"><title>[^<]*</title>\s*(?:<circle[^>]*stroke[^>]*>)?\s*<circle cx="([0-9.]+)"',
            timeline,
        )
    ]
    gaps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert (
        len(xs) == 6 and gaps[2] > gaps[0]
    )  # 2 s between calls 2 and 3, 1.5 s between 0 and 1: placed by time


def test_several_trajectories_without_o_say_no_html_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = tmp_path / "a", tmp_path / "b"
    one.mkdir(), two.mkdir()
    assert main(["report", str(trajectory(one)), str(trajectory(two))]) == 0
    assert "no HTML for several trajectories unless -o FILE" in capsys.readouterr().err


# --- headless Chromium ------------------------------------------------------------------------------------------------


def chromium() -> str | None:
    return next(
        (p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None
    )


# Chromium as the machine notes run it: headless, no sandbox (root), no background traffic on a closed network.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
# Added to a copy of the page only (the report itself has no script): where each section was laid out.
PROBE = """<script>
addEventListener("load", () => {
  const tops = [...document.querySelectorAll("section[id]")].map(s => [s.id, s.getBoundingClientRect().top]);
  document.body.setAttribute("data-layout", JSON.stringify(tops));
});
</script>"""


def run_chromium(executable: str, args: list[str], profile: Path) -> str:
    done = subprocess.run(
        [executable, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,  # a bound for a hung browser, not a speed check
        env={**os.environ, "HOME": str(profile)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="no chromium, chromium-browser or google-chrome on PATH")
def test_chromium_lays_the_verdict_out_first_and_takes_a_screenshot(tmp_path: Path) -> None:
    executable = chromium()
    assert executable is not None
    page_file = tmp_path / "report.html"
    page_file.write_text(page(tmp_path, ["followed-injection", "gave-up"]), encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(page_file.read_text().replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = run_chromium(executable, ["--dump-dom", probed.as_uri()], tmp_path / "profile")
    layout = json.loads(re.search(r'data-layout="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    tops = dict(layout)
    assert [name for name, _ in sorted(layout, key=lambda item: item[1])][: len(ORDER)] == ORDER
    assert tops["verdict"] < 200  # above the fold: the first thing a reader sees
    shot = tmp_path / "report.png"
    run_chromium(
        executable, ["--window-size=1280,1400", f"--screenshot={shot}", page_file.as_uri()], tmp_path / "p2"
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    keep = os.environ.get("AW_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
