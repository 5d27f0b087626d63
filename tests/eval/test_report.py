"""`aw-mcp report`: the text summary and the self-contained HTML report of a recorded trajectory."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from mcp import Client

from aw_mcp.cli import main
from aw_mcp.eval.report import histogram_svg, percentile
from tests.protocol.test_perturb_server import make

RUN = """
  - name: flaky
    match: {tool: get_report}
    fault: {kind: error, status: 503}
    schedule: {mode: every, every: 2}
  - name: slow
    match: {tool: list_orders}
    fault: {kind: latency, fixed_ms: 40}
  - name: cut
    match: {tool: get_order}
    fault: {kind: truncate}
"""


async def _record(path: Path) -> None:
    server, _, _ = make(RUN, record=path)
    async with Client(server) as client:
        for _ in range(4):
            await client.call_tool("get_report", {})
            await client.call_tool("list_orders", {})
        await client.call_tool("get_order", {"order_id": "ORD-<1>"})


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)


@pytest.mark.anyio
async def test_report_renders_summary_and_self_contained_html(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trajectory = tmp_path / "run.jsonl"
    await _record(trajectory)
    out = tmp_path / "report.html"
    assert main(["report", str(trajectory), "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "9 call(s) in 1 session(s), 3 tool(s), 2 error(s) (22%)" in stdout
    assert "calls per tool: get_report 4, list_orders 4, get_order 1" in stdout
    # every firing counted, as world://faults lists them: flaky 2 + slow 4 applied, cut 1 without effect
    assert "faults fired: 7 (6 applied, 1 without effect)" in stdout
    assert "  flaky [error]: 2" in stdout and "  slow [latency]: 4" in stdout
    assert "  cut [truncate]: 0, 1 without effect" in stdout
    page = out.read_text()
    parser = _Tags()
    parser.feed(page)
    assert page.startswith("<!DOCTYPE html>") and parser.tags.count("svg") == 2
    # self-contained: no scripts, stylesheets, images or links to anything outside the page
    assert not {"script", "link", "img", "iframe"} & set(parser.tags)
    urls = [v for k, v in parser.attrs if k in ("src", "href") and v and not v.startswith("#")]
    assert urls == []
    # in-page links (the scorecard's verdicts point at calls) all land on a call's row
    anchors = {v for k, v in parser.attrs if k == "id"}
    links = {v[1:] for k, v in parser.attrs if k == "href" and v and v.startswith("#")}
    assert links and links <= anchors
    assert re.findall(r"https?://[^\"\s<]+", page) == ["http://www.w3.org/2000/svg"] * 2
    assert "ORD-&lt;1&gt;" in page or "ORD-<1>" not in page  # user data is escaped
    for name in ("flaky", "slow", "cut"):
        assert f"<td>{name}</td>" in page
    # the histogram's bars account for every call
    bars = [int(n) for n in re.findall(r"ms: (\d+) call\(s\)</title>", page)]
    assert sum(bars) == 9


def test_report_default_output_next_to_the_trajectory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trajectory = tmp_path / "empty.jsonl"
    trajectory.write_text("")
    assert main(["report", str(trajectory)]) == 0
    assert (tmp_path / "empty.html").exists()
    assert (
        "0 call(s)" in capsys.readouterr().out
        and "faults fired: 0 (none)" in (tmp_path / "empty.html").read_text()
    )


def test_report_of_a_broken_trajectory_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    trajectory = tmp_path / "bad.jsonl"
    trajectory.write_text('{"type": "call", "tool": "a", "arguments": {}}\nnot json\n')
    assert main(["report", str(trajectory), "-o", str(tmp_path / "x.html")]) == 1
    assert f"{trajectory}:2: not valid JSON" in capsys.readouterr().err


def test_percentile_and_histogram_edges() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert "no calls" in histogram_svg([])
