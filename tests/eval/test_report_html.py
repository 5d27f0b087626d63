"""The HTML report as a person reads it in a browser (issue 22.7), and fork families in the report and the
scorecard JSON (issue 24).

The page is rendered by Jinja2 with autoescaping; these tests read it back with an HTML parser, and (marked slow)
open it in headless Chromium when one is installed.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from aw_mcp import Env
from aw_mcp.cli import main
from aw_mcp.eval.report import call_anchor, cut, histogram, html_report, nice_step, summarize
from aw_mcp.trajectory.records import CallRecord, Consistency, Contradiction, FaultEntry, ForkPoint

HOSTILE = "<script>alert('x')</script>&amp;\"quoted\""
LONG_OBSERVATION = " ".join(f"word{i:03d}" for i in range(120))  # 959 characters, no word over 7


def call(index: int, tool: str = "get_order", **fields: object) -> CallRecord:
    return CallRecord(
        world="w",
        session=fields.pop("session", "s1"),
        index=index,
        tool=tool,
        time=f"2026-01-01T00:00:{index:02d}.000Z",
        **fields,
    )


def unavailable(applied: bool = True) -> FaultEntry:
    return FaultEntry.model_validate(
        {
            "name": "flaky/unavailable",
            "kind": "error",
            "parameters": {"status": 503},
            "call": 1,
            "applied": applied,
            "status": 503,
            **({} if applied else {"reason": "another fault already answered this call"}),
        }
    )


def write(path: Path, records: list[CallRecord]) -> Path:
    path.write_text("".join(r.to_line() + "\n" for r in records), encoding="utf-8")
    return path


class Page(HTMLParser):
    """The elements of a page with their attributes, and each element's text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.texts: list[tuple[str, dict[str, str | None], str]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag not in ("br", "meta", "hr", "img", "input", "link"):  # HTML's void elements have no end tag
            self.open.append((tag, dict(attrs), []))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))  # `<line .../>`: nothing inside

    def handle_endtag(self, tag: str) -> None:
        if not any(name == tag for name, _, _ in self.open):
            return
        while self.open:
            name, attrs, parts = self.open.pop()
            self.texts.append((name, attrs, "".join(parts)))
            if self.open:
                self.open[-1][2].extend(parts)
            if name == tag:
                return

    def handle_data(self, data: str) -> None:
        if self.open:
            self.open[-1][2].append(data)

    def text_of(self, tag: str) -> list[str]:
        return [text for name, _, text in self.texts if name == tag]


def render(tmp_path: Path, records: list[CallRecord]) -> tuple[str, Page]:
    page = html_report(summarize(write(tmp_path / "run.jsonl", records)))
    return page, Page(page)


def test_the_histogram_has_axis_titles_and_round_ticks(tmp_path: Path) -> None:
    latencies = [3.0, 5.0, 5.5, 8.0, 12.0, 12.5, 13.0, 40.0, 41.0, 42.0, 43.0, 44.0, 95.0]
    chart = histogram(latencies)
    assert [t.label for t in chart.y_ticks] == ["0", "1", "2", "3", "4", "5"]  # peak 5 calls in one bin
    assert [t.label for t in chart.x_ticks] == ["0", "20", "40", "60", "80", "100"]
    assert sum(int(b.title.split(": ")[1].split()[0]) for b in chart.bars) == len(latencies)
    records = [call(i, latency_ms=ms) for i, ms in enumerate(latencies)]
    _, page = render(tmp_path, records)
    svg_texts = page.text_of("text")
    assert "latency (ms)" in svg_texts and "calls" in svg_texts
    assert {"0", "1", "2", "3", "4", "5", "20", "100"} <= set(svg_texts)
    assert nice_step(7) == 2 and nice_step(1) == 0.2 and nice_step(95) == 20


def test_a_503_is_red_in_the_timeline_with_a_fault_ring(tmp_path: Path) -> None:
    records = [
        call(0, observation="ok"),
        call(1, observation="Error: 503 Service Unavailable", is_error=True, faults=[unavailable()]),
        call(2, observation="a slow but fine answer", faults=[FaultEntry(name="slow", kind="latency")]),
    ]
    _, page = render(tmp_path, records)
    circles = [attrs for tag, attrs in page.elements if tag == "circle"]
    fills = [c["fill"] for c in circles if c.get("fill") != "none"]
    rings = [c for c in circles if c.get("fill") == "none"]
    assert fills == ["#3b7dd8", "#d83b3b", "#3b7dd8"]  # blue ok, red error (the 503), blue ok
    assert len(rings) == 2 and {r["stroke"] for r in rings} == {"#e08a00"}  # both calls a fault fired on
    assert "error (an injected one too)" in page.text_of("span")


def test_fault_details_read_as_fields_not_python(tmp_path: Path) -> None:
    records = [call(0, observation="Error: 503", is_error=True, faults=[unavailable(applied=False)])]
    text, page = render(tmp_path, records)
    assert "'applied'" not in text and "False" not in text and "{'" not in html.unescape(text)
    items = [t for t in page.text_of("li") if ":" in t]
    assert "applied: no" in items and "status: 503" in items and 'parameters: {"status": 503}' in items
    assert "reason: another fault already answered this call" in items


def test_long_observations_are_cut_at_a_word_and_open_in_full(tmp_path: Path) -> None:
    records = [call(0, observation=LONG_OBSERVATION), call(1, observation="short answer")]
    _, page = render(tmp_path, records)
    (summary,) = page.text_of("summary")
    preview = summary.split(" (")[0]
    assert preview.endswith("…") and LONG_OBSERVATION.startswith(preview[:-1])
    assert re.fullmatch(r"(word\d{3} )*word\d{3}…", preview)  # whole words only
    assert 100 <= len(preview) <= 201 and "959 characters" in summary
    assert LONG_OBSERVATION in page.text_of("pre")  # all of it, one click away
    assert "short answer" in page.text_of("code") and len(page.text_of("details")) == 1
    assert cut("abc", 10) == "abc" and cut("x" * 30, 10) == "x" * 10 + "…"  # one long word: cut inside it


def test_each_call_says_what_it_contradicted(tmp_path: Path) -> None:
    """The calls table marks a contradicting answer in its row (not only in the text summary): the rule, the
    message, a link to the call that established what it contradicts, and a redraw."""
    deleted = Contradiction(rule="deleted", message="order ORD-7 was cancelled by call 0", earlier=0)
    from_state = Contradiction(rule="field", message="ORD-1 status is shipped in the world's state")
    records = [
        call(0, tool="cancel_order", observation="cancelled"),
        call(1, observation="ORD-7 pending", consistency=Consistency(contradictions=[deleted, from_state])),
        call(2, observation="ORD-1 shipped", consistency=Consistency(drawn=3, kept=2)),
        call(3, observation="fine"),
    ]
    _, page = render(tmp_path, records)
    rows = {attrs["id"]: text for name, attrs, text in page.texts if name == "tr" and attrs.get("id")}
    row1, row2, row3 = (rows[call_anchor("s1", index)] for index in (1, 2, 3))
    assert "contradicts [deleted]: order ORD-7 was cancelled by call 0 (established by call 0)" in row1
    assert "contradicts [field]: ORD-1 status is shipped in the world's state (the world's state)" in row1
    assert "resampled: answer 2 of 3 drawn kept" in row2 and "contradicts" not in row2
    assert "contradicts" not in row3 and "resampled" not in row3
    marks = [
        text for name, attrs, text in page.texts if name == "span" and attrs.get("class") == "contradiction"
    ]
    assert marks == ["contradicts"]  # the result column of call 1 only
    links = [attrs.get("href") for name, attrs in page.elements if name == "a"]
    assert f"#{call_anchor('s1', 0)}" in links  # the contradiction's "established by call 0"


def test_everything_from_the_trajectory_is_escaped(tmp_path: Path) -> None:
    fault = FaultEntry.model_validate(
        {"name": HOSTILE, "kind": "error", "status": 503, "reason": HOSTILE, "ground_truth": HOSTILE}
    )
    records = [
        call(
            0, tool=HOSTILE, session=HOSTILE, arguments={HOSTILE: HOSTILE}, observation=HOSTILE, error=HOSTILE
        ),
        call(1, tool=HOSTILE, session=HOSTILE, observation=HOSTILE * 20, is_error=True, faults=[fault]),
        call(2, tool=HOSTILE, session=HOSTILE, notice=HOSTILE),
    ]
    text, page = render(tmp_path, records)
    assert "<script" not in text and not [tag for tag, _ in page.elements if tag == "script"]
    assert "&lt;script&gt;" in text
    assert any(HOSTILE in t for t in page.text_of("td"))  # shown as written, not interpreted


@pytest.mark.anyio
async def test_a_fork_family_is_grouped_under_its_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "forks.jsonl"
    root = await Env.open("mcp_crm", backend="demo", record=str(record))
    envs = [root]
    try:
        for query in ("a", "b", "c"):
            await root.call("search_contacts", {"query": query})
        kids = await root.fork(2)
        envs += kids
        for kid in kids:
            await kid.call("list_deals", {"owner_id": "usr_03"})
        (grandchild,) = await kids[0].fork(1)
        envs.append(grandchild)
        await grandchild.call("search_contacts", {"query": "d"})
        other = await Env.open("mcp_crm", backend="demo", record=str(record))  # a second, unrelated family
        envs.append(other)
        await other.call("search_contacts", {"query": "e"})
    finally:
        for env in envs:
            await env.close()
    ids = [e.session.id for e in envs]  # root, kid 0, kid 1, grandchild, other
    out = tmp_path / "forks.html"
    assert main(["report", str(record), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert (
        f"fork family of session {ids[0]}: {ids[1]} (forked from {ids[0]} at call 3), "
        f"{ids[3]} (forked from {ids[1]} at call 4), {ids[2]} (forked from {ids[0]} at call 3)"
    ) in text
    page = Page(out.read_text())
    assert "Sessions and fork families" in page.text_of("h2")
    items = page.text_of("li")
    (root_item,) = [t for t in items if t.startswith(f"session {ids[0]}:")]
    # the root's item holds its forks, and the first fork's holds the grandchild
    assert root_item.index(ids[1]) < root_item.index(ids[3]) < root_item.index(ids[2])
    (kid_item,) = [t for t in items if t.startswith(f"session {ids[1]}:")]
    assert f"forked from {ids[0]} at call 3" in kid_item and ids[3] in kid_item and ids[2] not in kid_item
    (other_item,) = [t for t in items if t.startswith(f"session {ids[4]}:")]
    assert "forked" not in other_item

    assert main(["report", str(record), "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    sessions = [(s["session"], s["family"], s["forked_from"], s["calls"]) for s in card["sessions"]]
    assert sessions == [
        (ids[0], ids[0], None, 3),
        (ids[1], ids[0], {"session": ids[0], "call": 3}, 1),
        (ids[3], ids[0], {"session": ids[1], "call": 4}, 1),
        (ids[2], ids[0], {"session": ids[0], "call": 3}, 1),
        (ids[4], ids[4], None, 1),
    ]


def test_a_fork_of_a_session_not_in_the_file_is_a_root_that_says_so(tmp_path: Path) -> None:
    records = [call(3, session="child", forked_from=ForkPoint(session="elsewhere", call=3))]
    text, page = render(tmp_path, records)
    (item,) = [t for t in page.text_of("li") if t.startswith("session child")]
    assert "forked from elsewhere at call 3 (a session not in this trajectory)" in item


# ---------------------------------------------------------------------------------------------------------------
# in a real browser
# ---------------------------------------------------------------------------------------------------------------


def browser() -> str | None:
    return next(
        (path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))),
        None,
    )


def open_in_browser(executable: str, page: Path, profile: Path) -> str:
    """The DOM headless Chromium built from the file (`--dump-dom`), after it loaded and laid it out."""
    done = subprocess.run(
        [
            executable,
            "--headless",
            "--no-sandbox",  # a container's root user has no sandbox
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(profile)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(browser() is None, reason="no chromium, chromium-browser or google-chrome on PATH")
def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    records = [
        call(0, observation=LONG_OBSERVATION, latency_ms=12.0),
        call(1, observation="Error: 503", is_error=True, faults=[unavailable()], latency_ms=3.0),
        call(2, observation="fine", latency_ms=20.0),
        call(
            3, session="s2", forked_from=ForkPoint(session="s1", call=3), observation=HOSTILE, latency_ms=7.0
        ),
    ]
    report = tmp_path / "report.html"
    report.write_text(html_report(summarize(write(tmp_path / "run.jsonl", records))), encoding="utf-8")
    executable = browser()
    assert executable is not None
    dom = open_in_browser(executable, report, tmp_path / "profile")
    page = Page(dom)
    headings = page.text_of("h2")
    for section in (
        "Sessions and fork families",
        "Calls per tool",
        "Faults fired",
        "Latency",
        "Timeline",
        "Robustness scorecard",
        "Every fault",
        "Calls",
    ):
        assert section in headings, headings
    assert "Judge scores" not in headings  # not judged: the empty section is left out
    assert [tag for tag, _ in page.elements].count("svg") == 2 and len(page.text_of("details")) == 1
    assert "<script" not in dom and "parsererror" not in dom
    # Each chart on its own, as the strict XML parser browsers use for .svg files reads it: no markup error.
    for number, svg in enumerate(re.findall(r"<svg.*?</svg>", report.read_text(), flags=re.S)):
        image = tmp_path / f"chart{number}.svg"
        image.write_text(svg, encoding="utf-8")
        shown = open_in_browser(executable, image, tmp_path / "profile")
        assert "<svg" in shown and "parsererror" not in shown and "error on line" not in shown
