"""Whether the embedded engine can run here: the `[engine]` extra (torch, transformers, ...) is installed or not.

Checked without importing anything heavy (`importlib.util.find_spec`), so paths that do not use the engine never
import torch.
"""

from __future__ import annotations

import importlib.util

from aw_mcp.errors import UserError

# Import name -> distribution name, for the packages the engine imports itself (triton is optional: the engine falls
# back to plain-torch ops without it).
ENGINE_PACKAGES = {
    "torch": "torch",
    "transformers": "transformers",
    "safetensors": "safetensors",
    "tokenizers": "tokenizers",
    "huggingface_hub": "huggingface_hub",
}
INSTALL_HINT = "pip install 'agentworld-mcp[engine]' (in a checkout: pip install -e '.[engine]')"


class EngineNotInstalledError(UserError):
    """The `[engine]` extra is missing; the message says how to install it and what else works without it."""


def missing_engine_packages() -> list[str]:
    return [dist for module, dist in ENGINE_PACKAGES.items() if importlib.util.find_spec(module) is None]


def require_engine(purpose: str) -> None:
    """Raise EngineNotInstalledError naming the missing packages when the engine extra is not installed."""
    missing = missing_engine_packages()
    if missing:
        raise EngineNotInstalledError(
            f"{purpose} needs the embedded engine, which is not installed (missing: {', '.join(missing)}). "
            f"Install it with: {INSTALL_HINT}. Without it, point at a vLLM/SGLang server with --base-url "
            "http://HOST:PORT/v1, or try `aw-mcp demo` (no model at all)."
        )
