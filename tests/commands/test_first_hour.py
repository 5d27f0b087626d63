"""Issue 22, "The first hour": what a new user meets in their first commands.

- A hint repeats the options of the command it came from (`serve` at a terminal suggests an mcpServers entry and an
  `aw-mcp shell` line that work as printed: `--backend demo` above all).
- Demo answers are labelled wherever they are shown (`aw-mcp call`, `aw-mcp shell`, the MCP result, the trajectory),
  and a demo answer scripted for other arguments than the call's says so.
- One way to name a world, with the same messages in every command.
- Small things: plural counts and whole descriptions in `aw-mcp worlds`, help for `--transport`, examples in
  `serve --help`.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

import pytest

from aw_mcp import Env
from aw_mcp.backends.demo import NOTICE, DemoWorldModel
from aw_mcp.cli import build_parser, main
from aw_mcp.commands.serve import terminal_hint
from aw_mcp.core.errors import UnknownWorldError
from aw_mcp.core.model_io import CallRef, GenerationParams
from aw_mcp.core.settings import read_settings
from aw_mcp.load.world import load_world
from aw_mcp.sim.world_setup import reproduce_flags
from aw_mcp.spec.bundled import bundled_worlds, resolve_world_path
from aw_mcp.trajectory.records import read_trajectory

# An id no example of mcp_crm's get_contact has (the pattern is con_ and six digits).
UNKNOWN_CONTACT = {"contact_id": "con_999999"}


def serve_args(*flags: str):
    return build_parser().parse_args(["serve", *flags])


def hint_for(*flags: str, env: dict[str, str] | None = None) -> str:
    args = serve_args(*flags)
    return terminal_hint(args.world, reproduce_flags(args, read_settings(env or {})))


def suggestions(hint: str) -> tuple[dict, list[str]]:
    """The mcpServers entry and the `aw-mcp shell` command line a hint suggests."""
    entry_text = hint.split("mcpServers entry such as ", 1)[1].split(", try the tools by hand", 1)[0]
    shell_line = hint.split("try the tools by hand with `", 1)[1].split("`", 1)[0]
    return json.loads(entry_text), shlex.split(shell_line)


# ---------------------------------------------------------------------------------------------------------------
# 2. hints repeat what the user typed
# ---------------------------------------------------------------------------------------------------------------


def test_the_hint_repeats_the_backend_the_server_runs_with() -> None:
    entry, shell = suggestions(hint_for("--world", "mcp_crm", "--backend", "demo"))
    assert entry == {
        "mcp_crm": {"command": "aw-mcp", "args": ["serve", "--world", "mcp_crm", "--backend", "demo"]}
    }
    assert shell == ["aw-mcp", "shell", "--world", "mcp_crm", "--backend", "demo"]


def test_the_hint_repeats_every_option_that_shapes_the_world_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = tmp_path / "my world.yaml"
    world.write_text(resolve_world_path("mcp_crm").read_text(encoding="utf-8"), encoding="utf-8")
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    monkeypatch.chdir(tmp_path)
    hint = hint_for(
        "--world",
        "my world.yaml",  # relative: an MCP client starts the server in a folder of its own
        "--prompts",
        "prompts",
        "--preset",
        "flaky:probability=0.3",
        "--seed",
        "7",
        "--temperature",
        "0.2",
        "--max-tokens",
        "512",
        "--no-thinking",
        "--record",
        "run.jsonl",  # the trajectory is this server's own: a hint does not suggest appending to it
        "--auth-token",
        "tok-never-shown-1234",
        env={
            "AW_BASE_URL": "http://user:pass-never-shown@gpu-box:8000/v1",
            "AW_MODEL": "qwen-aw",
            "AW_API_KEY": "sk-never-shown-5678",
        },
    )
    entry, shell = suggestions(hint)
    expected = [
        "--world",
        str(world.resolve()),
        "--prompts",
        str(prompts.resolve()),
        "--preset",
        "flaky:probability=0.3",
        "--base-url",
        "http://***@gpu-box:8000/v1",  # from AW_BASE_URL, which the client's environment may not have
        "--model",
        "qwen-aw",
        "--seed",
        "7",
        "--temperature",
        "0.2",
        "--max-tokens",
        "512",
        "--no-thinking",
    ]
    assert entry == {"my world": {"command": "aw-mcp", "args": ["serve", *expected]}}
    assert shell == ["aw-mcp", "shell", *expected]
    for secret in ("never-shown", "run.jsonl"):
        assert secret not in hint


def test_the_suggested_shell_line_runs_as_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, shell = suggestions(
        hint_for("--world", "mcp_crm", "--backend", "demo", "--preset", "flaky:probability=1.0")
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO('search_contacts {"query": "murphy"}\n'))
    assert main(shell[1:]) == 0  # `shell` takes --preset too, so every flag of the hint is understood
    out = capsys.readouterr().out
    assert "[error, " in out and "flaky/" in out  # the preset is on, as on the server


@pytest.mark.slow  # an `aw-mcp serve` subprocess
@pytest.mark.anyio
async def test_the_suggested_mcp_servers_entry_serves_the_same_world() -> None:
    from mcp import Client, StdioServerParameters

    entry, _ = suggestions(hint_for("--world", "mcp_crm", "--backend", "demo"))
    (config,) = entry.values()
    server = StdioServerParameters(command=sys.executable, args=["-m", "aw_mcp", *config["args"]])
    async with Client(server) as client:
        result = await client.call_tool("search_contacts", {"query": "murphy"})
    assert not result.is_error and result.content[-1].text == f"[{NOTICE}]"


# ---------------------------------------------------------------------------------------------------------------
# 4. demo answers are labelled everywhere
# ---------------------------------------------------------------------------------------------------------------


def test_call_labels_a_demo_answer_on_stderr_and_keeps_stdout_the_observation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    world = load_world(resolve_world_path("mcp_crm"))
    example = world.tool("get_contact").examples[0]
    args = json.dumps(example.arguments)
    assert main(["call", "--world", "mcp_crm", "get_contact", "--args", args, "--backend", "demo"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == example.result  # stdout stays pipeable
    assert f"[{NOTICE}]" in captured.err.splitlines()


def test_call_says_when_the_demo_answer_is_another_examples(capsys: pytest.CaptureFixture[str]) -> None:
    args = json.dumps(UNKNOWN_CONTACT)
    assert main(["call", "--world", "mcp_crm", "get_contact", "--args", args, "--backend", "demo"]) == 0
    err = capsys.readouterr().err
    assert "no example of get_contact has these arguments, so this replays the example for" in err


def test_shell_labels_demo_answers_in_text_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    world = load_world(resolve_world_path("mcp_crm"))
    example = world.tool("get_contact").examples[0]
    lines = f"get_contact {json.dumps(example.arguments)}\nget_contact {json.dumps(UNKNOWN_CONTACT)}\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    assert main(["shell", "--world", "mcp_crm", "--backend", "demo"]) == 0
    out = capsys.readouterr().out
    labels = [line for line in out.splitlines() if line.startswith("[demo backend")]
    assert labels[0] == f"[{NOTICE}]"
    assert "no example of get_contact has these arguments" in labels[1]
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    assert main(["shell", "--world", "mcp_crm", "--backend", "demo", "--json"]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert results[0]["notice"] == NOTICE
    assert "replays the example for" in results[1]["notice"]


@pytest.mark.anyio
async def test_the_demo_backend_says_when_no_example_has_the_arguments() -> None:
    world = load_world(resolve_world_path("mcp_crm"))
    backend = DemoWorldModel(world)
    tool = world.tool("get_contact")
    exact = await backend.generate(
        [], GenerationParams(), None, CallRef("get_contact", tool.examples[0].arguments, 0)
    )
    assert "notice" not in exact.extra  # the world's own example: the backend's notice says all
    other = await backend.generate([], GenerationParams(), None, CallRef("get_contact", UNKNOWN_CONTACT, 1))
    notice = other.extra["notice"]
    assert json.loads(other.text) == tool.examples[0].result  # the nearest example, as before ...
    assert (
        "get_contact" in notice and json.dumps(tool.examples[0].arguments["contact_id"]) in notice
    )  # ... said


@pytest.mark.anyio
async def test_a_replayed_demo_answer_is_labelled_in_the_mcp_result_and_the_trajectory(
    tmp_path: Path,
) -> None:
    record = tmp_path / "run.jsonl"
    world = load_world(resolve_world_path("mcp_crm"))
    example = world.tool("get_contact").examples[0]
    env = await Env.open("mcp_crm", backend="demo", record=str(record))
    try:
        exact = await env.call("get_contact", example.arguments)
        replayed = await env.call("get_contact", UNKNOWN_CONTACT)
    finally:
        await env.close()
    assert exact.content[-1].text == f"[{NOTICE}]"
    label = replayed.content[-1].text
    assert not replayed.is_error and label.startswith("[demo backend: no example of get_contact has these")
    notices = [r.notice for r in read_trajectory(record)]
    assert notices == [NOTICE, label[1:-1]]


# ---------------------------------------------------------------------------------------------------------------
# 5. one way to name a world
# ---------------------------------------------------------------------------------------------------------------


def test_a_bundled_name_works_in_validate_as_in_serve(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "mcp_crm"]) == 0
    assert capsys.readouterr().out.strip() == "1 world file(s) valid"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("./missing.yaml", "no such file: './missing.yaml'"),
        ("worlds/nope", "no such file: 'worlds/nope'"),
        ("missing.yml", "no such file: 'missing.yml'"),
        ("nosuch", "no bundled world named 'nosuch'"),
    ],
)
def test_every_command_names_a_missing_world_the_same_way(
    name: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(UnknownWorldError) as caught:
        resolve_world_path(name)
    said = str(caught.value)
    assert said.startswith(message) and all(p.stem in said for p in bundled_worlds())
    commands = [
        ["serve", "--world", name, "--backend", "demo"],
        ["call", "--world", name, "get_contact", "--backend", "demo"],
        ["shell", "--world", name, "--backend", "demo"],
        ["demo", "--world", name, "-o", str(tmp_path)],
        ["validate", name],
    ]
    for command in commands:
        assert main(command) == 1, command
        err = capsys.readouterr().err.splitlines()
        assert f"aw-mcp {command[0]}: {said}" in err, (command, err)


def test_validate_goes_on_past_an_unknown_world(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "nosuch", "mcp_crm"]) == 1
    err = capsys.readouterr().err
    assert "no bundled world named 'nosuch'" in err and "1 problem(s) in 1 of 2 file(s)" in err


def test_a_folder_is_not_a_world(tmp_path: Path) -> None:
    with pytest.raises(UnknownWorldError, match="is a folder, not a world file"):
        resolve_world_path(str(tmp_path))


# ---------------------------------------------------------------------------------------------------------------
# 8. small things
# ---------------------------------------------------------------------------------------------------------------


def test_worlds_counts_in_words_and_shows_whole_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worlds"]) == 0
    out = capsys.readouterr().out
    assert " 1 tools" not in out
    assert "terminal_devbox" in out and " 1 tool\n" in out
    words = " ".join(out.split())
    for path in bundled_worlds():
        assert " ".join(load_world(path).description.split()) in words  # whole, wrapped
    assert max(len(line) for line in out.splitlines()) <= 100


def test_serve_help_explains_transport_and_shows_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    transport = text.split("\n  --transport {stdio,http}", 1)[1].split("\n  --", 1)[0]
    assert "stdio" in transport and "http" in transport and "MCP client" in transport
    examples = text.split("examples:", 1)[1]
    assert examples.count("aw-mcp serve --world") >= 2 and "--backend demo" in examples
