"""One module per `aw-mcp` subcommand; each has `register(subparsers)` and sets `func(args) -> int`.

`SUBCOMMANDS` names each command's module and its line in `aw-mcp --help`, in the order they are listed: the command
line imports a command's module only when that command runs (its own `--help` included), so `aw-mcp --help` imports
none of them and `aw-mcp validate` never imports the MCP SDK.
"""

SUBCOMMANDS: dict[str, tuple[str, str]] = {  # name -> (module under aw_mcp.commands, one-line help)
    "serve": ("serve", "serve a world as an MCP server"),
    "mirror": (
        "mirror",
        "serve a real MCP server through aw-mcp: record it, fault its answers, shadow-predict them",
    ),
    "calibrate": (
        "calibrate",
        "how close the world model's shadow predictions came to the real answers (--json, --fail-on)",
    ),
    "demo": (
        "demo",
        "see the product work offline in under a minute (scripted answers, a fault, the report)",
    ),
    "validate": ("validate", "validate world YAML files (or bundled worlds by name)"),
    "call": ("call", "call one tool of a world and print the observation"),
    "worlds": ("worlds", "list the bundled worlds"),
    "engine": ("engine", "run the built-in Qwen3.5-MoE engine (e.g. `aw-mcp engine serve --model PATH`)"),
    "import": ("import_world", "create a world from an OpenAPI document or an MCP server"),
    "shell": ("shell", "an interactive prompt for calling a world's tools"),
    "report": (
        "report",
        "summarize recorded trajectories: text, HTML and the robustness scorecard (--json, --fail-on)",
    ),
    "judge": ("judge", "score a recorded trajectory with the trained judge protocol"),
    "bench": ("bench", "score a world model on AgentWorldBench-format samples"),
}


def summary(name: str) -> str:
    """A command's line in `aw-mcp --help` (and its subparser's `help`)."""
    return SUBCOMMANDS[name][1]
