"""`aw-mcp` imports a subcommand's module only when that command runs: `--help`, `validate` and `worlds` never
import the MCP SDK (2 s of a 3-4 s start before), and a command's own flags and errors are as they were."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aw_mcp.cli import build_parser, main
from aw_mcp.commands import SUBCOMMANDS
from tests.conftest import REPO, SUBPROCESS_S

# One fresh interpreter (what a user's shell starts): which modules each command line imported.
PROBE = """
import contextlib, io, sys
from aw_mcp.cli import main
for argv in (["--help"], ["validate", "mcp_crm"], ["worlds"]):
    before = set(sys.modules)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(argv)
    new = set(sys.modules) - before
    sdk = sorted(m for m in new if m == "mcp" or m.startswith("mcp."))
    commands = sorted(m.rpartition(".")[2] for m in new if m.startswith("aw_mcp.commands."))
    print(argv[0], bool(sdk), ",".join(commands))
"""


def test_help_validate_and_worlds_do_not_import_the_mcp_sdk() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=SUBPROCESS_S
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["--help False ", "validate False validate", "worlds False worlds"]


def test_every_command_is_listed_and_parses_its_own_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = capsys.readouterr().out
    assert all(f"    {name}" in listing for name in SUBCOMMANDS)
    args = build_parser(["-v", "validate", "a.yaml"]).parse_args(["-v", "validate", "a.yaml"])
    assert (args.command, args.paths, args.verbose) == ("validate", ["a.yaml"], True)
    assert build_parser().parse_args(["worlds"]).command == "worlds"  # no argv: every command, flags included


def test_a_mistyped_command_is_one_line_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["valdate", "x.yaml"])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'valdate'" in error and "validate" in error and error.count("\n") == 1
