"""The replay backend answers from a recorded trajectory, keyed by tool and canonical arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aw_mcp.backends.replay import ReplayMiss, ReplayWorldModel
from aw_mcp.core.model_io import BackendError, CallRef, Generation, GenerationParams


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def record(index: int, tool: str, arguments: dict[str, Any], raw: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "world": "crm",
        "session": "s1",
        "index": index,
        "time": "2026-01-01T00:00:00Z",
        "tool": tool,
        "arguments": arguments,
        "messages_hash": "abc",
        "raw": raw,
        "reasoning": extra.pop("reasoning", None),
        "observation": raw,
        "structured": None,
        "is_error": False,
        "latency_ms": 12.5,
        "error": None,
        "faults": [],
        **extra,
    }


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


async def answer(model: ReplayWorldModel, tool: str, arguments: dict[str, Any], index: int = 0) -> str:
    generation = await model.generate([], GenerationParams(), call=CallRef(tool, arguments, index))
    return generation.text


@pytest.fixture
def trajectory(tmp_path: Path) -> Path:
    return write(
        tmp_path / "run.jsonl",
        [
            {
                "type": "tools_list",
                "v": 1,
                "world": "crm",
                "session": "s1",
                "tools": ["get_balance"],
            },  # not a call
            record(0, "find_contact", {"name": "Ada", "limit": 5}, "found Ada", reasoning="search the table"),
            record(1, "get_balance", {}, "balance 10"),
            record(2, "get_balance", {}, None, error="backend down"),  # failed before the model: skipped
            record(3, "get_balance", {}, "balance 7"),
            "",
        ],
    )


@pytest.mark.anyio
async def test_it_keeps_the_world_model_contract(trajectory: Path) -> None:
    # What a caller of any WorldModel relies on: a name for messages, preload() that loads nothing (the file was
    # read when it opened), generate() giving a fresh Generation, aclose() that can be called and called again.
    model = ReplayWorldModel(trajectory)
    assert model.name == "replay"
    assert await model.preload() is False
    ada = CallRef("find_contact", {"name": "Ada", "limit": 5}, 0)
    first = await model.generate([], GenerationParams(), call=ada)
    assert isinstance(first, Generation)
    assert (first.text, first.reasoning, first.extra) == ("found Ada", "search the table", {"replayed": True})
    first.extra["annotated"] = True  # a caller's note on its copy does not reach the recording
    assert (await model.generate([], GenerationParams(), call=ada)).extra == {"replayed": True}
    await model.aclose()
    await model.aclose()


@pytest.mark.anyio
async def test_hit_matches_arguments_regardless_of_key_order(trajectory: Path) -> None:
    model = ReplayWorldModel(trajectory)
    generation = await model.generate(
        [{"role": "user", "content": "anything"}],
        GenerationParams(),
        call=CallRef("find_contact", {"limit": 5, "name": "Ada"}, 9),
    )
    assert generation.text == "found Ada"
    assert generation.reasoning == "search the table"


@pytest.mark.anyio
async def test_repeated_calls_get_recordings_in_order_then_the_last_repeats(trajectory: Path) -> None:
    model = ReplayWorldModel(trajectory)
    answers = [await answer(model, "get_balance", {}) for _ in range(4)]
    assert answers == ["balance 10", "balance 7", "balance 7", "balance 7"]
    # Another session over the same file starts from the first recording again.
    assert await answer(ReplayWorldModel(trajectory), "get_balance", {}) == "balance 10"


@pytest.mark.anyio
async def test_miss_names_tool_arguments_file_and_recorded_tools(trajectory: Path) -> None:
    model = ReplayWorldModel(trajectory)
    with pytest.raises(ReplayMiss) as caught:
        await answer(model, "find_contact", {"name": "Grace"})
    message = str(caught.value)
    assert "'find_contact'" in message and '"name":"Grace"' in message
    assert str(trajectory) in message
    assert "recorded tools: find_contact, get_balance" in message
    assert isinstance(caught.value, BackendError)


@pytest.mark.anyio
async def test_unknown_tool_is_a_miss(trajectory: Path) -> None:
    with pytest.raises(ReplayMiss, match="'delete_contact'"):
        await answer(ReplayWorldModel(trajectory), "delete_contact", {"id": 1})


@pytest.mark.anyio
async def test_call_reference_is_required(trajectory: Path) -> None:
    with pytest.raises(BackendError, match="which tool call"):
        await ReplayWorldModel(trajectory).generate([], GenerationParams())


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="does not exist") as caught:
        ReplayWorldModel(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in str(caught.value)


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", [record(0, "t", {}, "ok"), '{"tool": "t", "arguments": {'])
    with pytest.raises(BackendError, match=r"bad\.jsonl:2: not valid JSON"):
        ReplayWorldModel(path)


def test_record_without_tool_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "odd.jsonl", [{"raw": "text", "arguments": {}}])
    with pytest.raises(BackendError, match=r"odd\.jsonl:1: tool: Field required"):
        ReplayWorldModel(path)


@pytest.mark.anyio
async def test_empty_recording_misses_with_no_tools(tmp_path: Path) -> None:
    model = ReplayWorldModel(write(tmp_path / "empty.jsonl", []))
    with pytest.raises(ReplayMiss, match="recorded tools: none"):
        await answer(model, "t", {})
