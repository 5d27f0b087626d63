"""mcp-use's MCPClient over stdio: a call with the optional arguments sent as null, as mcp-use's agents send every
optional argument they leave out. Run from a venv with mcp-use: `python mcp_use_nulls.py AW_MCP_PYTHON`."""

import asyncio
import importlib.metadata as md
import sys

from mcp_use import MCPClient


async def main() -> None:
    server = sys.argv[1]
    print("mcp-use", md.version("mcp-use"), "mcp", md.version("mcp"))
    config = {
        "mcpServers": {
            "crm": {
                "command": server,
                "args": ["-m", "aw_mcp", "serve", "--world", "mcp_crm", "--backend", "demo"],
            }
        }
    }
    client = MCPClient.from_dict(config)
    session = await client.create_session("crm")
    print("tools:", [t.name for t in await session.list_tools()])
    arguments = {"query": "murphy", "lifecycle_stage": None, "limit": None, "cursor": None}
    result = await session.call_tool("search_contacts", arguments)
    text = result.content[0].text if result.content else ""
    print(f"search_contacts({arguments}) -> isError {result.isError}:", text[:120].replace("\n", " "))
    await client.close_all_sessions()
    assert not result.isError, text
    print("OK mcp-use optional arguments as null")


asyncio.run(main())
