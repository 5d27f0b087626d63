"""World spec validation: good files, bad files with file:line errors, bundled worlds, the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aw_mcp.cli import main
from aw_mcp.load.world import load_world, load_world_text, validate_paths
from aw_mcp.spec.bundled import bundled_worlds
from aw_mcp.spec.domains import BUILTIN_TOOLS, DOMAINS, SCREEN_DOMAINS
from aw_mcp.spec.issues import WorldSpecError
from tests.conftest import REPO, SMALL_WORLD, SUBPROCESS_S

BROKEN = """\
name: broken
domain: mcp
now: yesterday-ish
tools:
  - name: get_x
    inputSchema:
      type: object
      properties: {a: {type: integer}}
    examples:
      - arguments: {a: "text"}
        result: ok
  - name: bad name!
    inputSchema: {type: array}
    colour: red
model:
  temperature: 5
"""


def test_small_world_parses_with_defaults() -> None:
    world = load_world_text(SMALL_WORLD)
    assert world.name == "tiny-shop" and world.seed == 7
    assert world.model.temperature == 0.6 and world.model.top_p is None and world.model.top_k is None
    assert world.model.token_budget == 32768  # the official evaluation's budget
    assert world.model.model_copy(update={"thinking": False}).token_budget == 8192  # fast mode keeps its own
    assert world.facts[1].tools == ["get_order"]
    assert world.tool("get_order").structured and not world.tool("cancel_order").structured


def test_broken_file_reports_every_problem_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    with pytest.raises(WorldSpecError) as info:
        load_world(path)
    lines = str(info.value).splitlines()
    expected = {
        3: "now",
        5: "tools[0]",
        12: "tools[1].name",
        13: "tools[1].inputSchema",
        14: "tools[1].colour",
        16: "model.temperature",
    }
    for line_no, field in expected.items():
        assert any(line.startswith(f"{path}:{line_no}: {field}:") for line in lines), (line_no, lines)
    assert "ISO 8601" in str(info.value)
    assert "unknown key" in str(info.value)
    assert "'text' is not of type 'integer'" in str(info.value)


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    path = tmp_path / "syntax.yaml"
    path.write_text("name: x\ntools: [\n  - a: b\n")
    issues = validate_paths([path])
    assert len(issues) == 1 and issues[0].line >= 2 and "invalid YAML" in issues[0].message


def test_mcp_world_needs_tools_and_unique_names() -> None:
    with pytest.raises(WorldSpecError, match="at least one tool"):
        load_world_text("name: empty\n")
    twice = "name: d\ntools:\n  - {name: a}\n  - {name: a}\n"
    with pytest.raises(WorldSpecError, match="duplicate tool name 'a'"):
        load_world_text(twice)


@pytest.mark.parametrize("domain", [d for d in DOMAINS if d != "mcp"])
def test_non_mcp_domains_get_builtin_tools(domain: str) -> None:
    world = load_world_text(
        f"name: w\ndomain: {domain}\nscreen: s\n"
        if domain in SCREEN_DOMAINS
        else f"name: w\ndomain: {domain}\n"
    )
    assert [t.name for t in world.tools] == [t["name"] for t in BUILTIN_TOOLS[domain]]


def test_builtin_tools_can_get_examples_and_extra_tools() -> None:
    world = load_world_text(
        "name: t\ndomain: terminal\nscreen: $\ntools:\n"
        "  - name: send_keys\n    examples: [{arguments: {keystrokes: 'pwd\\n'}, result: '/home/dev'}]\n"
        "  - {name: upload_file, inputSchema: {type: object}}\n"
    )
    assert [t.name for t in world.tools] == ["send_keys", "upload_file"]
    assert world.tools[0].examples[0].result == "/home/dev"
    assert "keystrokes" in world.tools[0].inputSchema["properties"]


def test_formats_are_checked_in_examples() -> None:
    bad = (
        "name: f\ntools:\n  - name: a\n    inputSchema: {type: object, properties: {e: {type: string, format: email}}}\n"
        "    examples: [{arguments: {e: not-an-email}, result: ok}]\n"
    )
    with pytest.raises(WorldSpecError, match="is not a 'email'"):
        load_world_text(bad)


def test_dangling_ref_is_a_spec_error_not_a_call_time_crash() -> None:
    text = "name: x\ntools:\n  - name: a\n    inputSchema: {type: object, properties: {b: {$ref: '#/$defs/gone'}}}\n"
    with pytest.raises(
        WorldSpecError, match=r"<string>:4: tools\[0\]\.inputSchema: .*'#/\$defs/gone' that points at nothing"
    ):
        load_world_text(text)


def test_extension_keys_are_allowed() -> None:
    world = load_world_text("name: x\nx-owner: team-a\ntools:\n  - {name: a, x-note: hi}\n")
    assert world.tools[0].name == "a"


def test_bundled_worlds_cover_every_domain_and_all_validate() -> None:
    paths = bundled_worlds()
    assert len(paths) >= 8
    assert validate_paths(paths) == []
    worlds = [load_world(p) for p in paths]
    assert {w.domain for w in worlds} >= set(DOMAINS)


def test_validate_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN)
    assert main(["validate", *map(str, bundled_worlds())]) == 0
    assert main(["validate", str(bad), str(bundled_worlds()[0])]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:16: model.temperature:" in err and "problem(s) in 1 of 2 file(s)" in err


def test_console_script_runs_validate() -> None:
    worlds = [str(p) for p in (REPO / "worlds").glob("*.yaml")]
    proc = subprocess.run(
        [sys.executable, "-m", "aw_mcp", "validate", *worlds],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_S,
    )
    assert proc.returncode == 0, proc.stderr
    # The verdict is the command's result: on stdout, so `aw-mcp validate ... > log` keeps it; nothing on stderr.
    assert proc.stdout == f"{len(worlds)} world file(s) valid\n" and proc.stderr == ""


def test_call_with_bad_json_arguments_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "call",
                "--world",
                "mcp_crm",
                "get_contact",
                "--args",
                "{oops",
                "--backend",
                "replay",
                "--replay",
                "/nonexistent.jsonl",
            ]
        )
        == 2
    )
    assert "--args is not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("before", "after", "where"),
    [
        ("readOnlyHint: true", 'readOnlyHint: "yes"', "readOnlyHint: Input should be a valid boolean"),
        ("seed: 7", 'seed: "7"', "seed: Input should be a valid integer"),
        (
            "now: 2026-03-01T09:00:00Z",
            'now: 2026-03-01T09:00:00Z\nmodel: {temperature: "0.6"}',
            "model.temperature",
        ),
    ],
)
def test_numbers_and_booleans_are_strict(before: str, after: str, where: str) -> None:
    """Quoted, a number or a boolean is text: an error at its line, never a silent coercion (README: strict)."""
    assert before in SMALL_WORLD
    with pytest.raises(WorldSpecError, match=where):
        load_world_text(SMALL_WORLD.replace(before, after, 1), "w.yaml")
    assert (
        load_world_text(SMALL_WORLD + "model: {temperature: 1}\n").model.temperature == 1.0
    )  # an int reads as a float
