"""aw_mcp/core/settings.py: every environment variable aw_mcp reads goes through one model (issue 23, item 6).

Each variable is read through AwSettings where it is used (backend choice, the API key, the HTTP token, the
pre-flight's hub switch); nothing else in aw_mcp reads os.environ; precedence is the command line > AW_* > the
world's `model:` block; a bad value is one line naming the variable, without echoing a secret or a URL.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from aw_mcp.backends.openai import OpenAIWorldModel
from aw_mcp.backends.resolve import DEFAULT_MODEL, resolve_backend
from aw_mcp.cli import main
from aw_mcp.commands import serve
from aw_mcp.core.redaction import known_secrets
from aw_mcp.core.settings import AwSettings, SettingsError, env_names, read_settings
from aw_mcp.spec.world import ModelSettings

PACKAGE = Path(__file__).resolve().parents[2] / "aw_mcp"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in env_names():
        monkeypatch.delenv(name, raising=False)


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


# ---------------------------------------------------------------------------------------------------------------
# one model for every variable
# ---------------------------------------------------------------------------------------------------------------


def test_every_aw_variable_named_in_aw_mcp_is_a_field_of_the_model() -> None:
    named = {m for path in sources() for m in re.findall(r"\bAW_[A-Z][A-Z0-9_]*", path.read_text("utf-8"))}
    assert named, "the scan found no AW_ name at all: it is looking in the wrong place"
    assert named <= set(env_names()), (
        f"read outside aw_mcp/core/settings.py: {sorted(named - set(env_names()))}"
    )
    assert set(env_names()) == {
        "AW_BACKEND",
        "AW_BASE_URL",
        "AW_MODEL",
        "AW_API_KEY",
        "AW_AUTH_TOKEN",
        "HF_HUB_OFFLINE",
    }


def _environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read a variable: os.environ[...] / .get(...), os.getenv(...), and `environ`/`getenv` imported."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ("environ", "getenv", "environb") for alias in node.names):
                lines.append(node.lineno)
    return lines


def test_nothing_but_settings_py_reads_the_environment() -> None:
    offenders = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in sources()
        if path.name != "settings.py" or path.parent != PACKAGE / "core"
        if (lines := _environment_reads(ast.parse(path.read_text("utf-8"))))
    }
    assert offenders == {}, "read the variable through aw_mcp.core.settings.read_settings()"
    assert _environment_reads(
        ast.parse((PACKAGE / "core" / "settings.py").read_text("utf-8"))
    )  # the scan works


def test_the_model_reads_each_variable_and_an_empty_one_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_settings() == AwSettings()
    assert read_settings().backend is None and read_settings().api_key_value is None
    monkeypatch.setenv("AW_BACKEND", "demo")
    monkeypatch.setenv("AW_BASE_URL", "https://gpu-box:8000/v1")
    monkeypatch.setenv("AW_MODEL", "qwen-aw")
    monkeypatch.setenv("AW_API_KEY", "sk-0123456789")
    monkeypatch.setenv("AW_AUTH_TOKEN", "tok-0123456789")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = read_settings()
    assert (settings.backend, settings.base_url, settings.model) == (
        "demo",
        "https://gpu-box:8000/v1",
        "qwen-aw",
    )
    assert (settings.api_key_value, settings.auth_token_value, settings.hf_hub_offline) == (
        "sk-0123456789",
        "tok-0123456789",
        True,
    )
    assert "sk-0123456789" not in repr(settings) and "tok-0123456789" not in repr(settings)
    monkeypatch.setenv("AW_BASE_URL", "")
    monkeypatch.setenv("aw_model", "lower-case is another variable")
    monkeypatch.delenv("AW_MODEL")
    assert read_settings().base_url is None and read_settings().model is None


@pytest.mark.parametrize(("value", "offline"), [("1", True), ("true", True), ("YES", True), ("0", False)])
def test_hf_hub_offline_reads_as_huggingface_hub_reads_it(
    monkeypatch: pytest.MonkeyPatch, value: str, offline: bool
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert read_settings().hf_hub_offline is offline


def test_a_given_mapping_stands_in_for_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_MODEL", "from-the-process")
    given = read_settings({"AW_BASE_URL": "http://box/v1", "AW_API_KEY": ""})
    assert (given.base_url, given.model, given.api_key) == ("http://box/v1", None, None)


def test_a_change_of_a_variable_is_seen_at_the_next_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_MODEL", "one")
    assert read_settings().model == "one"
    monkeypatch.setenv("AW_MODEL", "two")
    assert read_settings().model == "two"


# ---------------------------------------------------------------------------------------------------------------
# where each variable is used
# ---------------------------------------------------------------------------------------------------------------


def test_precedence_command_line_then_environment_then_world(monkeypatch: pytest.MonkeyPatch) -> None:
    world = ModelSettings(backend="openai", base_url="http://world/v1", model="world-model")
    assert resolve_backend(world).base_url_from_world
    assert (resolve_backend(world).base_url, resolve_backend(world).model) == (
        "http://world/v1",
        "world-model",
    )
    monkeypatch.setenv("AW_BACKEND", "demo")
    monkeypatch.setenv("AW_BASE_URL", "http://env/v1")
    monkeypatch.setenv("AW_MODEL", "env-model")
    from_env = resolve_backend(world)
    assert (from_env.backend, from_env.base_url, from_env.model) == ("demo", "http://env/v1", "env-model")
    assert not from_env.base_url_from_world  # the operator's URL: it gets AW_API_KEY
    from_cli = resolve_backend(world, backend="openai", base_url="http://cli/v1", model="cli-model")
    assert (from_cli.backend, from_cli.base_url, from_cli.model) == ("openai", "http://cli/v1", "cli-model")
    given = resolve_backend(ModelSettings(), env=read_settings({"AW_BASE_URL": "http://given/v1"}))
    assert (given.backend, given.base_url, given.model) == ("openai", "http://given/v1", DEFAULT_MODEL)


def test_the_api_key_reaches_the_backend_and_the_redactor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_API_KEY", "sk-settings-key-42")
    assert OpenAIWorldModel("http://127.0.0.1:1/v1", "m").api_key == "sk-settings-key-42"
    assert OpenAIWorldModel("http://127.0.0.1:1/v1", "m", send_api_key=False).api_key is None
    assert "sk-settings-key-42" in known_secrets()


def test_the_auth_token_reaches_the_http_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    class Stop(Exception):
        pass

    def capture(options):
        seen.append(options.auth_token)
        raise Stop

    monkeypatch.setattr(serve, "check_exposure", capture)
    monkeypatch.setenv("AW_AUTH_TOKEN", "tok-from-env-1234")
    args = serve_args("--transport", "http", "--host", "0.0.0.0")
    with pytest.raises(Stop):
        serve.run(args)
    with pytest.raises(Stop):
        serve.run(serve_args("--transport", "http", "--host", "0.0.0.0", "--auth-token", "tok-flag"))
    assert seen == ["tok-from-env-1234", "tok-flag"]  # the flag wins


def serve_args(*flags: str):
    from aw_mcp.cli import build_parser

    return build_parser().parse_args(["serve", "--world", "mcp_crm", "--backend", "demo", *flags])


# ---------------------------------------------------------------------------------------------------------------
# a bad value: one line naming the variable
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        (
            "AW_BACKEND",
            "abc",
            "AW_BACKEND: input should be 'openai', 'local', 'replay', 'demo' or 'hybrid', got 'abc'",
        ),
        (
            "AW_BASE_URL",
            "gpu-box:8000",
            "AW_BASE_URL: expected an http(s) URL such as http://127.0.0.1:8000/v1",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=re.escape(says)):
        read_settings()
    assert main(["serve", "--world", "mcp_crm", "--backend", "demo"]) == 1
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and err.startswith("aw-mcp serve: ") and says in err and "Traceback" not in err
    )


def test_a_bad_url_is_not_quoted_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_BASE_URL", "ftp://user:pass-never-shown@box/v1")
    with pytest.raises(SettingsError) as caught:
        read_settings()
    assert "AW_BASE_URL" in str(caught.value) and "never-shown" not in str(caught.value)


def test_a_bad_variable_does_not_break_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_BACKEND", "abc")
    assert isinstance(known_secrets(), list)  # an error text on its way out is still redacted
