"""Choosing and opening a world-model backend: command line > AW_* environment > the world's `model:` block."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.engine_extra import require_engine
from aw_mcp.core.errors import UserError
from aw_mcp.core.settings import BACKENDS, AwSettings, read_settings
from aw_mcp.core.strict_model import http_url
from aw_mcp.spec.world import ModelSettings, WorldSpec

log = logging.getLogger(__name__)

DEFAULT_MODEL = "Qwen/Qwen-AgentWorld-35B-A3B"


class BackendConfigError(UserError, ValueError):
    """The backend cannot be set up; the message names the ways out."""


@dataclass(frozen=True)
class BackendChoice:
    backend: str
    model: str
    base_url: str | None = None
    replay_path: str | None = None
    device: str | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    # The base URL came from the world file, not the command line or AW_BASE_URL: it gets AW_API_KEY only when
    # the operator trusts the world (--trust-world-backend).
    base_url_from_world: bool = False
    # hybrid: the world model answering what the recording (`replay_path`) does not: openai or local
    model_backend: str | None = None

    def answering(self) -> BackendChoice:
        """The choice of the world model itself: for hybrid, the one behind its recording."""
        if self.backend != "hybrid":
            return self
        return replace(self, backend=self.model_backend or "local", model_backend=None)


def resolve_backend(
    settings: ModelSettings,
    *,
    backend: str | None = None,
    base_url: str | None = None,
    model: str | None = None,
    replay_path: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    max_model_len: int | None = None,
    env: AwSettings | None = None,
) -> BackendChoice:
    """Each field: the argument (the command line) > `env` (AW_*, read now when not given) > the world's `settings`."""
    env = read_settings() if env is None else env
    try:
        http_url(
            base_url
        )  # the check AW_BASE_URL and a world's model.base_url get: the same words whichever way
    except ValueError as exc:
        raise BackendConfigError(f"--base-url {base_url!r}: {exc}") from None
    from_world = not (base_url or env.base_url) and settings.base_url is not None
    base_url = base_url or env.base_url or settings.base_url
    chosen = backend or env.backend or settings.backend or ("openai" if base_url else "local")
    if chosen not in BACKENDS:
        raise BackendConfigError(f"unknown backend {chosen!r}: expected one of {', '.join(BACKENDS)}")
    model = model or env.model or settings.model or DEFAULT_MODEL
    if chosen == "openai" and not base_url:
        raise BackendConfigError(
            "the openai backend needs a server: pass --base-url http://HOST:PORT/v1 (or set AW_BASE_URL)"
        )
    if chosen in ("replay", "hybrid") and not replay_path:
        raise BackendConfigError(
            f"the {chosen} backend needs a recorded trajectory: pass --replay PATH.jsonl"
        )
    return BackendChoice(
        chosen,
        model,
        base_url,
        replay_path,
        device,
        dtype,
        max_model_len,
        base_url_from_world=from_world,
        model_backend=("openai" if base_url else "local") if chosen == "hybrid" else None,
    )


def sends_api_key(choice: BackendChoice, trust_world_backend: bool = False) -> bool:
    """Whether AW_API_KEY may go to `choice.base_url`, for calls and the pre-flight alike: always to a URL the
    operator gave (--base-url, AW_BASE_URL); to one from the world file only with --trust-world-backend, so a shared
    world file cannot collect the key."""
    return trust_world_backend or not choice.base_url_from_world


def open_backend(
    choice: BackendChoice,
    settings: ModelSettings,
    world: WorldSpec | None = None,
    trust_world_backend: bool = False,
) -> WorldModel:
    if choice.backend == "hybrid":
        from aw_mcp.backends.hybrid import HybridWorldModel

        if world is None:
            raise BackendConfigError(
                "the hybrid backend reads the world's tool annotations: it needs a world"
            )
        assert choice.replay_path is not None
        model = open_backend(choice.answering(), settings, world, trust_world_backend)
        return HybridWorldModel(choice.replay_path, world, model)
    if choice.backend == "demo":
        if world is None:
            raise BackendConfigError(
                "the demo backend answers from a world's tool examples: it needs a world"
            )
        from aw_mcp.backends.demo import DemoWorldModel

        return DemoWorldModel(world)
    if choice.backend == "openai":
        from aw_mcp.backends.openai import OpenAIWorldModel
        from aw_mcp.core.redaction import redact_url

        assert choice.base_url is not None
        send_key = sends_api_key(choice, trust_world_backend)
        if not send_key and read_settings().api_key_value:
            log.warning(
                "AW_API_KEY is not sent to %s: that URL comes from the world file; pass --base-url, set AW_BASE_URL, "
                "or --trust-world-backend",
                redact_url(choice.base_url),
            )
        return OpenAIWorldModel(
            choice.base_url,
            choice.model,
            timeout_s=settings.timeout_s,
            retries=settings.retries,
            send_api_key=send_key,
        )
    if choice.backend == "replay":
        from aw_mcp.backends.replay import ReplayWorldModel

        assert choice.replay_path is not None
        return ReplayWorldModel(choice.replay_path)
    try:
        from aw_mcp.backends.local import LocalWorldModel
    except ImportError as exc:
        raise BackendConfigError(
            f"the local engine cannot be imported ({exc}); use --base-url with a vLLM/SGLang server, "
            "or --backend replay"
        ) from None
    require_engine("--backend local")
    return LocalWorldModel(
        choice.model, device=choice.device, dtype=choice.dtype, max_model_len=choice.max_model_len
    )
