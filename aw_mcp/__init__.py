"""agentworld-mcp: virtual MCP tools answered by the Qwen-AgentWorld language world model."""

from typing import TYPE_CHECKING, Any

from aw_mcp.core.version import __version__

__all__ = ["Env", "__version__"]

if TYPE_CHECKING:
    from aw_mcp.env import Env


def __getattr__(name: str) -> Any:
    # `import aw_mcp` stays light (the CLI reads __version__ from it); the in-process API loads on first use.
    if name == "Env":
        from aw_mcp.env import Env

        return Env
    raise AttributeError(f"module 'aw_mcp' has no attribute {name!r}")
