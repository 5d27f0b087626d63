"""MCP on the wire: the server (tools, resources, transports), the HTTP guard, the fork route, JSON-RPC message
checks."""
