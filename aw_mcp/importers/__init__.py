"""Importers: turn an API description (OpenAPI document, live MCP server, saved tools/list) into a world file."""
