"""A small real MCP server for the mirror walk-through (docs/mirror.md): notes kept in memory, over stdio."""

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
NOTES: dict[str, str] = {}


@server.tool()
def add_note(title: str, text: str) -> dict:
    """Store a note under a title."""
    NOTES[title] = text
    return {"title": title, "count": len(NOTES)}


@server.tool()
def get_note(title: str) -> dict:
    """Read the note with this title."""
    if title not in NOTES:
        raise ToolError(f"no note titled {title!r}")
    return {"title": title, "text": NOTES[title]}


if __name__ == "__main__":
    server.run()
