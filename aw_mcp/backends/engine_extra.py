"""Whether the embedded engine can run here: the `[engine]` extra (torch, transformers, ...) is installed or not.

Checked without importing anything heavy (`importlib.util.find_spec`), so paths that do not use the engine never
import torch.
"""

from __future__ import annotations

import importlib.util

from aw_mcp.core.errors import UserError

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
# Said before the install command, so nobody downloads the engine for a machine that cannot run the model.
HARDWARE = (
    "It runs the model on one GPU with about 75 GiB of memory (the default model's bf16 weights and cache: an "
    "H100/H200 80 GB-class card), or on a 24 GB card from a GGUF file (Q4_K_M at a 32k context: --model FILE.gguf)"
)
INSTALL_SIZE = "about 3 GB of wheels, 5.7 GB installed (torch with its CUDA libraries)"


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
            f"{HARDWARE}; on such a machine install it with: {INSTALL_HINT}; {INSTALL_SIZE}. Without it, point at "
            "a vLLM/SGLang server with --base-url http://HOST:PORT/v1, or try `aw-mcp demo` (no model at all)."
        )
