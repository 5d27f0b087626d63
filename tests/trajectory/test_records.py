"""The trajectory's typed records: a call written and read back is the same call, and `--resume` refuses a line of
the wrong shape with its file, line and field, while a torn last line is still skipped."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from aw_mcp.cli import main
from aw_mcp.load.world import load_world_text
from aw_mcp.sim.registry import SessionRegistry
from aw_mcp.trajectory.records import (
    TRAJECTORY_VERSION,
    CallRecord,
    FaultEntry,
    ListingRecord,
    TrajectoryFormatError,
    TrajectoryWriter,
    read_lines,
    read_trajectory,
)
from tests.conftest import SMALL_WORLD


def a_call(index: int = 0, **fields: object) -> CallRecord:
    return CallRecord.model_validate(
        {
            "world": "tiny-shop",
            "session": "s1",
            "index": index,
            "tool": "get_order",
            "arguments": {"order_id": "ORD-1"},
        }
        | fields
    )


def test_a_written_call_reads_back_equal_with_its_fault_details(tmp_path: Path) -> None:
    fault = FaultEntry.model_validate(
        {"name": "busy", "kind": "error", "parameters": {"status": 503}, "schedule": {"mode": "always"}}
        | {"call": 1, "applied": True, "status": 503, "retry_after_s": 5}
    )
    fault.ground_truth = "the real answer"
    written = [a_call(0, observation="ok", faults=[fault]), a_call(1, error="cancelled by the client")]
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    for record in written:
        writer.write(record)
    writer.close()
    line = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert line["v"] == TRAJECTORY_VERSION and line["type"] == "call"
    # a fault entry keeps exactly the fields it was given (kind-specific ones too), none of the unset ones
    assert line["faults"] == [
        {"name": "busy", "kind": "error", "parameters": {"status": 503}, "schedule": {"mode": "always"}}
        | {"call": 1, "applied": True, "ground_truth": "the real answer", "status": 503, "retry_after_s": 5}
    ]
    assert list(read_trajectory(tmp_path / "t.jsonl")) == written


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ({"tool": "get_order", "index": "third"}, "index: Input should be a valid integer"),
        ({"tool": "get_order", "arguments": ["ORD-1"]}, "arguments: Input should be a valid dictionary"),
        ({"tool": "get_order", "faults": [{"kind": "error"}]}, "faults.0.name: Field required"),
        ({"tool": "get_order", "v": TRAJECTORY_VERSION + 1}, "written by a newer aw-mcp"),
    ],
)
def test_resume_names_the_file_line_and_field_of_a_bad_record(
    tmp_path: Path, line: dict[str, object], problem: str
) -> None:
    path = tmp_path / "run.jsonl"
    good = a_call().to_line()
    listing = ListingRecord(session="s1", before_call=1, tools=["get_order"]).to_line()
    path.write_text(good + "\n" + listing + "\n" + json.dumps(line) + "\n")
    registry = SessionRegistry(load_world_text(SMALL_WORLD))
    with pytest.raises(TrajectoryFormatError) as caught:
        registry.resume(path)
    assert str(caught.value).startswith(f"{path}:3: ") and problem in str(caught.value)


@pytest.mark.parametrize(
    "foreign",
    [{"type": "session", "id": "s1"}, {"type": 3}, {"session": "s1", "index": 0, "judgement": None}],
)
def test_a_foreign_line_is_named_by_file_and_line(tmp_path: Path, foreign: dict[str, object]) -> None:
    """A line that is not a trajectory record (another tool's JSONL, a judge file) is an error, never skipped."""
    path = tmp_path / "run.jsonl"
    path.write_text(a_call().to_line() + "\n" + json.dumps(foreign) + "\n")
    with pytest.raises(TrajectoryFormatError) as caught:
        list(read_lines(path))
    assert str(caught.value).startswith(f"{path}:2: ")


def test_listings_read_back_beside_calls(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = TrajectoryWriter(path)
    call, listing = a_call(0), ListingRecord(world="w", session="s1", before_call=1, tools=["a", "b"])
    writer.write(call)
    writer.write(listing)
    writer.close()
    assert list(read_lines(path)) == [call, listing]
    assert list(read_trajectory(path)) == [call]


def test_resume_restores_valid_records_and_skips_a_torn_last_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(a_call(0, observation="shipped").to_line() + "\n" + '{"type": "call", "tool": "get_')
    registry = SessionRegistry(load_world_text(SMALL_WORLD))
    with caplog.at_level(logging.WARNING):
        assert registry.resume(path) == 1
    assert f"{path}:2: ignoring a torn last line" in caplog.text
    [record] = registry.get().records
    assert (record.session, record.tool, record.observation) == ("s1", "get_order", "shipped")
    assert registry.get().claim_index() == 1


def test_serve_resume_with_a_bad_record_is_one_line_naming_it(
    tmp_path: Path, small_world_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"tool": "get_order", "latency_ms": "slow"}) + "\n")
    code = main(["serve", "--world", str(small_world_path), "--resume", str(path), "--no-preflight"])
    err = capsys.readouterr().err
    assert code == 1 and f"{path}:1: latency_ms: Input should be a valid number" in err


def test_a_version_1_line_reads_as_answered_by_the_model_and_a_shadowed_call_reads_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    old = {"v": 1, "type": "call", "tool": "get_order", "observation": "ok"}
    shadowed = a_call(
        1,
        observation='{"id": 1}',
        answered_by="upstream",
        shadow={"observation": '{"id": 2}', "is_error": False, "latency_ms": 12.5, "model": "m"},
    )
    path.write_text(json.dumps(old) + "\n" + shadowed.to_line() + "\n")
    first, second = read_trajectory(path)
    assert first.answered_by == "model" and first.shadow is None and first.v == 1
    assert second == shadowed and second.shadow is not None and second.shadow.observation == '{"id": 2}'
    assert json.loads(shadowed.to_line())["v"] == TRAJECTORY_VERSION == 2
    with pytest.raises(ValueError, match="answered_by"):
        a_call(answered_by="oracle")
