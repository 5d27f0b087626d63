"""One module per `aw-mcp` subcommand; each has `register(subparsers)` and sets `func(args) -> int`."""
