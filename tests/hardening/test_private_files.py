"""Issue 21, item 4: files hold what the trajectory holds, so they get its mode. Everything `aw-mcp` writes that quotes
calls (trajectory, judge results, bench results, scorecard JSON, HTML report) is 0600; an existing file with wider
permissions is tightened, and one that cannot be is refused with one line before a byte is written."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from aw_mcp.cli import main
from aw_mcp.commands.serve import scorecard_writer
from aw_mcp.core.private_files import PrivateFileError, open_private, write_private_text
from aw_mcp.eval.report import write_report
from aw_mcp.load.world import load_world_text
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.trajectory.records import CallRecord, TrajectoryWriter
from tests.conftest import SMALL_WORLD
from tests.eval.test_judge_bench import GOOD, bench_file, judge_by_domain, record_session
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def shared(path: Path, text: str = "") -> Path:
    """A file as an earlier run (or a careless user) left it: readable by everyone."""
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)
    return path


def trajectory(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    writer = TrajectoryWriter(path)
    writer.write(CallRecord(tool="get_order", arguments={"order_id": "ORD-1"}, observation="secret order"))
    writer.close()
    return path


def test_new_files_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with open_private(tmp_path / "a" / "new.jsonl") as out:
            out.write("x\n")
        write_private_text(tmp_path / "new.html", "<p>x</p>")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a" / "new.jsonl") == 0o600 and mode(tmp_path / "new.html") == 0o600


def test_an_existing_0644_trajectory_is_tightened_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = shared(tmp_path / "t.jsonl", '{"type": "call", "tool": "get_order"}\n')
    writer = TrajectoryWriter(path)
    writer.write(CallRecord(tool="get_order"))
    writer.close()
    assert mode(path) == 0o600  # before: stayed 0644
    assert len(path.read_text().splitlines()) == 2  # appended to, not replaced
    assert "was mode 0644; made it owner-only (0600)" in caplog.text


def test_html_reports_are_owner_only(tmp_path: Path) -> None:
    path = trajectory(tmp_path)
    write_report(path, tmp_path / "r.html")
    assert mode(tmp_path / "r.html") == 0o600  # before: 0644
    shared(tmp_path / "t.html", "old report")
    assert main(["report", str(path)]) == 0  # the default output, t.html, exists as 0644
    assert mode(tmp_path / "t.html") == 0o600 and "secret order" in (tmp_path / "t.html").read_text()
    assert main(["report", str(path), str(path), "--output", str(tmp_path / "all.html")]) == 0
    assert mode(tmp_path / "all.html") == 0o600


def test_the_scorecard_json_is_owner_only(tmp_path: Path) -> None:
    registry = SessionRegistry(load_world_text(SMALL_WORLD))
    card = shared(tmp_path / "card.json", "{}")
    scorecard_writer(registry, card, "run")()
    assert mode(card) == 0o600 and json.loads(card.read_text())["trajectories"] is not None


def test_judge_results_and_their_report_are_owner_only(tmp_path: Path) -> None:
    path = record_session(tmp_path)
    assert mode(path) == 0o600
    shared(tmp_path / "t.judge.jsonl")
    world = str(tmp_path / "repo.yaml")
    with ScriptedOpenAIServer([Reply(content=GOOD)]) as judge:
        assert main(["judge", str(path), "--base-url", judge.base_url, "--model", "j", "--world", world]) == 0
    assert mode(tmp_path / "t.judge.jsonl") == 0o600 and mode(tmp_path / "t.html") == 0o600


def test_bench_results_are_owner_only(tmp_path: Path) -> None:
    data = bench_file(tmp_path)
    results = shared(data.with_suffix(".results.jsonl"))
    answer = Reply(content="<think>x</think><predicted_observation>\nsecond\n</predicted_observation>")
    with ScriptedOpenAIServer([answer]) as world, ScriptedOpenAIServer(judge_by_domain) as judge:
        argv = ["bench", str(data), "--base-url", world.base_url, "--model", "m"]
        assert main([*argv, "--judge-base-url", judge.base_url, "--judge-model", "j"]) == 0
    assert mode(results) == 0o600 and len(results.read_text().splitlines()) == 7


def test_a_file_that_cannot_be_tightened_is_refused_in_one_line_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's 0644 file: chmod fails (simulated: tests may run as root), nothing is written."""
    path = shared(tmp_path / "theirs.html", "their report")

    def not_yours(fd: int, new_mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", not_yours)
    with pytest.raises(PrivateFileError) as caught:
        write_private_text(path, "our calls")
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "mode 0644" in message and "chmod 600" in message
    assert path.read_text() == "their report"  # not truncated
    with pytest.raises(PrivateFileError):
        TrajectoryWriter(path)
