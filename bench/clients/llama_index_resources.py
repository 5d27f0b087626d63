"""llama-index-tools-mcp with include_resources=True over stdio against `aw-mcp serve` (it lists resources and
resource templates). Run from a venv with llama-index-tools-mcp: `python llama_index_resources.py AW_MCP_PYTHON`."""

import asyncio
import importlib.metadata as md
import sys

from llama_index.tools.mcp import BasicMCPClient, McpToolSpec


async def main() -> None:
    server = sys.argv[1]
    print(
        "llama-index-tools-mcp",
        md.version("llama-index-tools-mcp"),
        "llama-index-core",
        md.version("llama-index-core"),
        "mcp",
        md.version("mcp"),
    )
    client = BasicMCPClient(server, args=["-m", "aw_mcp", "serve", "--world", "mcp_crm", "--backend", "demo"])
    tools = await McpToolSpec(client=client, include_resources=True).to_tool_list_async()
    names = [t.metadata.name for t in tools]
    print("tools and resources:", names)
    search = next(t for t in tools if t.metadata.name == "search_contacts")
    print(
        "search_contacts(query='murphy') ->", str(await search.acall(query="murphy"))[:160].replace("\n", " ")
    )
    assert "world-spec" in names
    print("OK llama-index include_resources=True")


asyncio.run(main())
