"""A misbehaving stdio MCP server for the mirror's failure tests, speaking raw JSON-RPC lines (no SDK, so it can
break the protocol on purpose). Tools: `echo` answers; `crash` exits mid-call; `hang` never answers; `garbage`
writes a line that is not JSON-RPC and never answers."""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = [
    {
        "name": name,
        "description": f"{name} tool",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }
    for name in ("echo", "crash", "hang", "garbage")
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw-upstream", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = request["params"]["name"]
        if name == "echo":
            text = request["params"].get("arguments", {}).get("text", "")
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {"content": [{"type": "text", "text": f"echo {text} pid {os.getpid()}"}]},
                }
            )
        elif name == "crash":
            os._exit(3)
        elif name == "hang":
            time.sleep(3600)
        elif name == "garbage":
            sys.stdout.write("this is not JSON-RPC\n")
            sys.stdout.flush()
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
