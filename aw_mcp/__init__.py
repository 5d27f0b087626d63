"""agentworld-mcp: virtual MCP tools answered by the Qwen-AgentWorld language world model."""

__version__ = "0.1.0"
