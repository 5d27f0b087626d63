"""A scripted agent for the mirror walk-through (docs/mirror.md): it talks to `aw-mcp mirror ARGS -- python
docs/examples/notes_server.py` with the mcp SDK's client and prints what it was answered.

    python docs/examples/mirror_agent.py --record run.jsonl
"""

import json
import sys
from pathlib import Path

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters

SERVER = str(Path(__file__).with_name("notes_server.py"))


async def main(mirror_flags: list[str]) -> None:
    mirror = StdioServerParameters(
        command="aw-mcp", args=["mirror", *mirror_flags, "--", sys.executable, SERVER]
    )
    async with Client(mirror, mode="legacy") as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(tool.name for tool in tools.tools))
        added = await client.call_tool("add_note", {"title": "plan", "text": "ship on friday"})
        print("add_note:", shown(added))
        read = await client.call_tool("get_note", {"title": "plan"})
        print("get_note:", shown(read))
        missing = await client.call_tool("get_note", {"title": "nope"})
        print("get_note (missing):", shown(missing))


def shown(result: types.CallToolResult) -> object:
    """A JSON answer as its value; an error as `isError` and its text."""
    text = result.content[0].text if result.content else ""
    return f"isError {text}" if result.is_error else json.loads(text)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
