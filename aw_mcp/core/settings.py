"""Every environment variable aw_mcp reads, in one model (pydantic-settings), read when it is used (never at import).

| variable | values | default | what it does |
| --- | --- | --- | --- |
| `AW_BACKEND` | `openai`, `local`, `replay`, `demo` | unset | the backend, as `--backend` |
| `AW_BASE_URL` | an http(s) URL | unset | the OpenAI-compatible server, as `--base-url` (it gets `AW_API_KEY`) |
| `AW_MODEL` | a name, path or hub id | unset | the model, as `--model` |
| `AW_API_KEY` | any text (a secret) | unset | sent as a bearer token to the model server (never to a world file's own URL unless `--trust-world-backend`); redacted from every text |
| `AW_AUTH_TOKEN` | any text (a secret) | unset | the bearer token HTTP clients must send to `aw-mcp serve --transport http`, as `--auth-token` |
| `HF_HUB_OFFLINE` | `1`, `true`, `on`, `yes` | unset | huggingface_hub's own switch: the pre-flight does not ask the hub for a model's size |

Precedence, for the backend: the command line > these variables > the world's `model:` block
(backends/resolve.py). An empty variable is unset. An invalid value is one line naming the variable
(`SettingsError`, a `UserError`), never a traceback. The engine's switches are in `engine/settings.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from aw_mcp.core.errors import UserError
from aw_mcp.core.strict_model import http_url

Backend = Literal["openai", "local", "replay", "demo", "hybrid"]
BACKENDS: tuple[str, ...] = get_args(Backend)

# huggingface_hub's own reading of its boolean variables (constants._is_true): anything else is false.
_HF_TRUE = ("1", "ON", "YES", "TRUE")


class SettingsError(UserError, ValueError):
    """An environment variable has a value aw_mcp cannot use; the message names it."""


class AwSettings(BaseSettings):
    """aw_mcp's environment, parsed. Build it with `read_settings()`, which turns a bad value into one line."""

    # Each field names its variable (validation_alias), so the table above and a grep find the same names.
    model_config = SettingsConfigDict(
        case_sensitive=True,  # AW_BASE_URL, not aw_base_url
        env_ignore_empty=True,  # AW_BASE_URL= is unset, as it always was
        frozen=True,
    )

    backend: Backend | None = Field(default=None, validation_alias="AW_BACKEND")
    base_url: str | None = Field(default=None, validation_alias="AW_BASE_URL")
    model: str | None = Field(default=None, validation_alias="AW_MODEL")
    api_key: SecretStr | None = Field(default=None, validation_alias="AW_API_KEY")
    auth_token: SecretStr | None = Field(default=None, validation_alias="AW_AUTH_TOKEN")
    hf_hub_offline: bool = Field(default=False, validation_alias="HF_HUB_OFFLINE")

    _http_url = field_validator("base_url")(http_url)

    @field_validator("hf_hub_offline", mode="before")
    @classmethod
    def _hf_flag(cls, value: object) -> object:
        return str(value).strip().upper() in _HF_TRUE if isinstance(value, str) else value

    @property
    def api_key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key is not None else None

    @property
    def auth_token_value(self) -> str | None:
        return self.auth_token.get_secret_value() if self.auth_token is not None else None


def env_name(field: str) -> str:
    """The environment variable behind a field of AwSettings."""
    alias = AwSettings.model_fields[field].validation_alias
    assert isinstance(alias, str), field
    return alias


def env_names() -> tuple[str, ...]:
    """Every variable AwSettings reads."""
    return tuple(env_name(field) for field in AwSettings.model_fields)


# Values never quoted back in an error: the secrets, and a URL (it may carry user:password@).
_UNQUOTED = ("AW_API_KEY", "AW_AUTH_TOKEN", "AW_BASE_URL")


def _one_line(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "the environment"  # the alias: the variable's name
        message = error["msg"].removeprefix("Value error, ")
        message = message[:1].lower() + message[1:]
        if name not in _UNQUOTED:
            message += f", got {error['input']!r}"
        problems.append(f"{name}: {message}")
    return "; ".join(problems) + " (fix the value or unset the variable)"


class _GivenEnvironment(AwSettings):
    """AwSettings from a mapping given in place of os.environ (a child process's environment, a test's)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # the given mapping only: not os.environ


_last: tuple[tuple[str | None, ...], AwSettings] | None = None


def read_settings(environ: Mapping[str, str] | None = None) -> AwSettings:
    """The environment as it is now (or `environ` in its place). Raises SettingsError (one line, naming the
    variable) for a bad value. os.environ is parsed again only when one of its variables changed (redaction reads
    it for every record line)."""
    global _last
    try:
        if environ is not None:
            return _GivenEnvironment(**{name: value for name in env_names() if (value := environ.get(name))})
        seen = tuple(os.environ.get(name) for name in env_names())
        last = _last
        if last is not None and last[0] == seen:
            return last[1]
        settings = AwSettings()
    except ValidationError as exc:
        raise SettingsError(_one_line(exc)) from None
    _last = (seen, settings)
    return settings


def child_environment() -> dict[str, str]:
    """The whole environment, for a child process started as if the user had started it (a mirrored MCP server
    keeps its own variables, e.g. MEMORY_FILE_PATH). The one other place the environment is read."""
    return dict(os.environ)
