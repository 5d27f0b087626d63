"""Issue 34, items 4, 5 and 7: world files are bounded by what they render to and by their size before a full
parse, each a `file:line` error naming the real cause; template slots are found in one pass and a big world or
template never stalls another session; what `serve` refuses at start, `validate` refuses (prompts folders,
unbounded waits).

Before the fix: a 100 KB file rendered to 20 MB (`validate` 32 s), a 1 MB one asked for 5 GB, big files without
aliases were parsed whole and blamed aliases, a 0.8 MB template's slots took 24 s to find, a 3.8M-character state
was rendered on the event loop by each new session's first call, and `fixed_ms: .inf` validated and never returned."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aw_mcp import Env
from aw_mcp.load.world import load_world_text, validate_paths
from aw_mcp.prompt.templates import slots_in
from aw_mcp.spec import source
from aw_mcp.spec.faults import LatencyFault
from aw_mcp.spec.issues import WorldSpecError
from tests.hardening.loop_lag import PING_BOUND_S, lag_during

HEAD = "name: big\ntools: [{name: t}]\n"


def refusal(text: str) -> str:
    started = time.monotonic()
    with pytest.raises(WorldSpecError) as caught:
        load_world_text(text, "w.yaml")
    assert time.monotonic() - started < 30  # refused, not rendered (before: 32 s, or a MemoryError)
    return str(caught.value)


def test_aliases_are_bounded_by_the_text_they_expand_to() -> None:
    twenty_mb = (
        HEAD + "x-big: &b " + "x" * 100_000 + "\nstate:\n" + "".join(f"  k{i}: *b\n" for i in range(200))
    )
    message = refusal(twenty_mb)
    assert message.startswith(
        "w.yaml:5: (file): this value expands to more than 4,000,000 characters of text"
    )
    assert "through its aliases" in message
    five_gb = HEAD + "x-l0: &l0 " + "y" * 1_000_000 + "\nx-l1: &l1 [" + ", ".join(["*l0"] * 70) + "]\n"
    five_gb += "state: [" + ", ".join(["*l1"] * 70) + "]\n"
    assert "characters of text through its aliases" in refusal(five_gb)


def test_a_big_file_is_refused_for_what_it_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(HEAD + "state: |\n" + ("  " + "z" * 1000 + "\n") * 9000)  # 9 MB, no alias
    started = time.monotonic()
    (issue,) = validate_paths([path])
    assert time.monotonic() - started < 10  # before parsing: PyYAML reads ~1 MB/s
    assert str(issue).startswith(f"{path}:1: (file): the file is 9,") and "refused before parsing" in str(
        issue
    )
    monkeypatch.setattr(source, "MAX_EXPANDED_NODES", 1000)
    many = HEAD + "state:\n" + "".join(f"  - {i}\n" for i in range(2000))
    message = refusal(many)
    assert "the file holds more than 1,000 values" in message and "alias" not in message


def test_template_slots_are_found_in_one_pass() -> None:
    template = "{world_name} and {facts}\n" * 48_000  # 1.2 MB, 96,000 slots
    started = time.monotonic()
    found = slots_in(template)
    assert time.monotonic() - started < 10  # before: quadratic, 24 s for 0.8 MB
    assert len(found) == 96_000 and found[-1] == ("facts", 48_000) and found[1] == ("facts", 1)


def _world(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(f"name: big\nmodel: {{context_tokens: 10000000}}\ntools: [{{name: t}}]\n{body}")
    return path


@pytest.mark.anyio
async def test_a_1_2_mb_template_never_stalls_another_session(tmp_path: Path) -> None:
    folder = tmp_path / "p" / "mcp"
    folder.mkdir(parents=True)
    template = "{tool_definitions}\n{facts}\n" + "{now} {now}\n" * 109_000  # 1.2 MB, 218,000 slots
    (folder / "system_prompt.txt").write_text(template)
    path = _world(tmp_path, "prompts: p\n")

    async def open_and_call() -> bool:
        async with await Env.open(str(path), backend="demo") as env:
            return (await env.call("t", {})).is_error

    started = time.monotonic()
    _, lag = await lag_during(open_and_call)
    assert time.monotonic() - started < 20  # ~1 s; before, the slot scan alone took over a minute
    assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"


@pytest.mark.slow  # PyYAML renders the 3.8M characters at load (~1 MB/s)
@pytest.mark.anyio
async def test_a_big_state_is_rendered_off_the_loop_for_a_new_session(tmp_path: Path) -> None:
    body = (
        "x-big: &b " + "v" * 100_000 + "\nstate:\n" + "".join(f"  k{i}: *b\n" for i in range(38))
    )  # 3.8M chars
    async with await Env.open(str(_world(tmp_path, body)), backend="demo") as env:
        _, lag = await lag_during(lambda: env.call("t", {}))
    assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"


@pytest.mark.parametrize(
    ("fault", "field"),
    [
        ("{kind: latency, fixed_ms: .inf}", "fault.fixed_ms"),
        ("{kind: latency, fixed_ms: 3600001}", "fault.fixed_ms"),
        ("{kind: latency, median_ms: 5, sigma: 10}", "fault.sigma"),
        ("{kind: latency, median_ms: 5, sigma: 1.0e+28}", "fault.sigma"),
        ("{kind: latency, mean_ms: 5, stddev_ms: .nan}", "fault.stddev_ms"),
        ("{kind: hang, seconds: .inf}", "fault.seconds"),
        ("{kind: error, timeout_s: 1.0e+9}", "fault.timeout_s"),
    ],
)
def test_waits_no_call_could_end_are_refused_at_validate(fault: str, field: str, tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(HEAD + f"perturbations:\n  - {{name: slow, fault: {fault}}}\n")
    errors = [str(i) for i in validate_paths([path]) if i.severity == "error"]
    assert errors and errors[0].startswith(f"{path}:4: perturbations[0].{field}"), errors


def test_a_sampled_delay_never_passes_an_hour() -> None:
    tail = LatencyFault(kind="latency", median_ms=3_000_000, sigma=4)
    assert tail.sample_ms(1 - 2**-53, 0.0, 0.5) == 3_600_000  # the far tail, cut
    assert LatencyFault(kind="latency", mean_ms=3_600_000, stddev_ms=3_600_000).sample_ms(
        1 - 2**-53, 0, 0.5
    ) == (3_600_000)


@pytest.mark.parametrize(
    ("folder", "expected"),
    [
        ("bad_slot", "unknown slot {nope}"),
        ("missing", "prompt template is missing"),
        ("/dev/null", "is not a directory laid out like prompts/"),
        ("too_big", "every call would be refused"),
    ],
)
def test_a_prompts_folder_serve_would_refuse_is_an_error_at_validate(
    folder: str, expected: str, tmp_path: Path
) -> None:
    (tmp_path / "bad_slot" / "mcp").mkdir(parents=True)
    (tmp_path / "bad_slot" / "mcp" / "system_prompt.txt").write_text("x\n{nope}\n")
    (tmp_path / "missing" / "mcp").mkdir(parents=True)
    (tmp_path / "too_big" / "mcp").mkdir(parents=True)
    (tmp_path / "too_big" / "mcp" / "system_prompt.txt").write_text("{tool_definitions}\n" + "w" * 600_000)
    path = tmp_path / "w.yaml"
    path.write_text(f"{HEAD}prompts: {folder}\n")
    errors = [str(i) for i in validate_paths([path]) if i.severity == "error"]
    assert len(errors) == 1 and errors[0].startswith(f"{path}:3: prompts: ") and expected in errors[0], errors


def test_a_fact_said_again_in_its_tools_turn_counts_in_the_fit() -> None:
    """Found by the fuzzer: a 250,000-character fact scoped to a tool fit the system prompt, but is repeated in that
    tool's action turn, so every call to it was refused for its size after the world validated."""
    fact = "n" * 250_000
    message = refusal(f'{HEAD}facts: [{{text: "{fact}", tools: [t]}}]\n')
    assert "w.yaml:3: facts: the world's own text needs about" in message and "`facts` alone" in message
    load_world_text(f'{HEAD}facts: ["{fact}"]\n')  # said once (no tools): it fits
