"""Choosing and opening a world-model backend: command line > AW_* environment > the world's `model:` block."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from aw_mcp.backends.base import WorldModel
from aw_mcp.engine_extra import require_engine
from aw_mcp.errors import UserError
from aw_mcp.world import ModelSettings, WorldSpec

DEFAULT_MODEL = "Qwen/Qwen-AgentWorld-35B-A3B"
BACKENDS = ("openai", "local", "replay", "demo")


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
    env: Mapping[str, str] | None = None,
) -> BackendChoice:
    env = os.environ if env is None else env
    base_url = base_url or env.get("AW_BASE_URL") or settings.base_url
    chosen = backend or env.get("AW_BACKEND") or settings.backend or ("openai" if base_url else "local")
    if chosen not in BACKENDS:
        raise BackendConfigError(f"unknown backend {chosen!r}: expected one of {', '.join(BACKENDS)}")
    model = model or env.get("AW_MODEL") or settings.model or DEFAULT_MODEL
    if chosen == "openai" and not base_url:
        raise BackendConfigError(
            "the openai backend needs a server: pass --base-url http://HOST:PORT/v1 (or set AW_BASE_URL)"
        )
    if chosen == "replay" and not replay_path:
        raise BackendConfigError("the replay backend needs a recorded trajectory: pass --replay PATH.jsonl")
    return BackendChoice(chosen, model, base_url, replay_path, device, dtype, max_model_len)


def open_backend(
    choice: BackendChoice, settings: ModelSettings, world: WorldSpec | None = None
) -> WorldModel:
    if choice.backend == "demo":
        if world is None:
            raise BackendConfigError(
                "the demo backend answers from a world's tool examples: it needs a world"
            )
        from aw_mcp.backends.demo import DemoWorldModel

        return DemoWorldModel(world)
    if choice.backend == "openai":
        from aw_mcp.backends.openai import OpenAIWorldModel

        assert choice.base_url is not None
        return OpenAIWorldModel(
            choice.base_url, choice.model, timeout_s=settings.timeout_s, retries=settings.retries
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
