"""The engine tried without weights from the README's words alone (issue 32, item 5): the README's `--model tiny`
command, run as written (in-process), builds the tiny random model into the user's cache and answers, saying the
answer is random. Slow: a real engine load and a prefill on a CPU."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from aw_mcp.cli import main
from tests.conftest import ENGINE, REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ENGINE, reason="needs the [engine] extra (torch, transformers, xgrammar)"),
]


def readme_command() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [line] = [ln for ln in re.findall(r"^aw-mcp .*$", readme, flags=re.M) if "--model tiny" in ln]
    return shlex.split(line)


def test_the_readme_tiny_model_command_answers_and_says_it_is_random(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    argv = readme_command()
    assert argv[0] == "aw-mcp"
    code = main(argv[1:])
    out, err = capsys.readouterr()
    assert code in (0, 1)  # the exit status follows the random answer (an "Error: ..." one is 1)
    assert out.strip()  # the answer, on stdout
    assert "random text, not the world model" in err  # the notice and the status line, on stderr
    assert re.search(r"\[(ok|error), [0-9.]+ ms\]", err)
    assert (tmp_path / "cache" / "aw-mcp" / "tiny-model-v1" / "config.json").is_file()
    assert "will result in indexing errors" not in err  # transformers' warning, noise for this engine


def test_engine_serve_help_names_tiny_and_the_real_default_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["engine", "serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "`tiny`" in text and "random answers" in text
    assert "default: 32768, or the checkpoint's own limit when smaller" in text
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "8192 on a CPU" not in text and "32768 tokens" in text
