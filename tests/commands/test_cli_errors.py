"""User mistakes are one line on stderr (exit 1, or 2 for bad flags) with no traceback; bugs keep their traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from aw_mcp.backends import engine_extra
from aw_mcp.cli import main
from aw_mcp.commands import validate
from aw_mcp.spec.bundled import bundled_worlds
from tests.conftest import REPO, SUBPROCESS_S


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def aw(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """`aw-mcp ARGS` in-process, through the entry point's main(argv): what a user's shell would show (a
    subprocess would add only its start-up; the console script's own path is tested below)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_unknown_tool_is_one_line_naming_the_tools(capsys: pytest.CaptureFixture[str]) -> None:
    proc = aw(capsys, "call", "--world", "mcp_crm", "get_contcat", "--backend", "demo")
    line = one_line(proc.stderr)
    assert proc.returncode == 1 and proc.stdout == ""
    assert line.startswith("aw-mcp call: Unknown tool: 'get_contcat'") and "get_contact" in line


def test_unknown_world_lists_the_bundled_worlds(capsys: pytest.CaptureFixture[str]) -> None:
    proc = aw(capsys, "serve", "--world", "nosuch")
    line = one_line(proc.stderr)
    assert proc.returncode == 1
    assert "no bundled world named 'nosuch'" in line
    assert all(p.stem in line for p in bundled_worlds())


def test_port_in_use_is_one_line_before_any_serving_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = aw(
            capsys,
            "serve",
            "--world",
            "mcp_crm",
            "--backend",
            "demo",
            "--transport",
            "http",
            "--port",
            str(port),
        )
    line = one_line(proc.stderr)
    assert proc.returncode == 1 and "serving" not in proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--port" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["serve", "--world", "mcp_crm", "--transport", "carrier-pigeon"],
            "invalid choice: 'carrier-pigeon'",
        ),
        (
            ["serve", "--world", "mcp_crm", "--port", "eighty"],
            "expected a port number (1-65535), got 'eighty'",
        ),
        (["serve"], "the following arguments are required: --world"),
        (["serve", "--world", "mcp_crm", "--backend", "demo", "--preset", "flaky:probability=7"], "--preset"),
        (
            ["call", "--world", "mcp_crm", "get_contact", "--args", "[1]", "--backend", "demo"],
            "--args must be",
        ),
    ],
)
def test_bad_flags_are_one_line_with_exit_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process (argparse's own errors exit from parse_args): the console script's path is the tests' around it.
    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    line = one_line(capsys.readouterr().err)
    assert code == 2 and expected in line and line.startswith("aw-mcp ")


def test_missing_engine_extra_is_one_line_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = engine_extra.importlib.util.find_spec
    monkeypatch.setattr(
        engine_extra.importlib.util, "find_spec", lambda name: None if name == "torch" else real(name)
    )
    assert main(["engine", "serve", "--model", "x/y"]) == 1
    line = one_line(capsys.readouterr().err)
    assert (
        "missing: torch" in line and "pip install 'agentworld-mcp[engine]'" in line and "--base-url" in line
    )
    assert main(["call", "--world", "mcp_crm", "get_contact", "--backend", "local"]) == 1
    assert "--backend local needs the embedded engine" in one_line(capsys.readouterr().err)


def test_verbose_shows_the_traceback_of_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", "serve", "--world", "nosuch"]) == 1
    err = capsys.readouterr().err
    assert (
        "Traceback" in err
        and "UnknownWorldError" in err
        and err.rstrip().endswith("`aw-mcp worlds` describes them)")
    )


def test_an_internal_error_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A ValueError/OSError from a bug is not a user mistake: it is raised (the interpreter prints it)."""

    def broken(paths: list[str]) -> list[object]:
        raise ValueError("a bug deep inside")

    monkeypatch.setattr(validate, "validate_paths", broken)
    with pytest.raises(ValueError, match="a bug deep inside"):
        main(["validate", str(bundled_worlds()[0])])


def test_an_internal_error_prints_a_traceback_from_the_console_script(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from aw_mcp import cli\n"
        "from aw_mcp.commands import worlds\n"
        "def boom(args):\n"
        "    raise KeyError('internal')\n"
        "worlds.run = boom\n"
        "sys.exit(cli.main(['worlds']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=str(REPO), capture_output=True, text=True, timeout=SUBPROCESS_S
    )
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "KeyError: 'internal'" in proc.stderr
