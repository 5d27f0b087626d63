"""openenv 0.10's MCPToolClient against `python -m aw_mcp.integrations.openenv WORLD` (openenv-core 0.3's server,
the [openenv] extra). openenv 0.10 pins mcp<2, so it runs from its own venv: `python openenv010_tool_client.py URL`."""

import asyncio
import importlib.metadata as md
import sys

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient


async def main() -> None:
    url = sys.argv[1]
    print("openenv", md.version("openenv"), "mcp", md.version("mcp"), "fastmcp", md.version("fastmcp"))
    async with MCPToolClient(base_url=url) as env:
        await env.reset()
        tools = await env.list_tools()
        print("list_tools:", [t.name for t in tools])
        data = await env.call_tool("search_contacts", query="murphy")
        print("call_tool('search_contacts', query='murphy') ->", str(data)[:140])
        step = await env.step(CallToolAction(tool_name="get_contact", arguments={"contact_id": "con_104214"}))
        print("step(CallToolAction get_contact) -> error", step.observation.error)
        state = await env.state()
        print("state() after list_tools, call_tool and step:", state)
        assert tools and data and state.step_count == 3  # one episode over the WebSocket and /mcp
    print("OK openenv 0.10 MCPToolClient")


asyncio.run(main())
