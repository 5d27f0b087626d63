"""`aw-mcp mirror`: serve a real MCP server's tools through aw-mcp: every call forwarded and recorded, faults applied
to the real answers, the world model optionally predicting each one beside it (`--shadow`)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import yaml

from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.preflight import preflight
from aw_mcp.backends.upstream import (
    DEFAULT_CALL_TIMEOUT_S,
    Passthrough,
    Upstream,
    UpstreamError,
    UpstreamTarget,
)
from aw_mcp.commands import summary
from aw_mcp.commands.serve import (
    _on_stop,
    add_preflight_flag,
    add_transport_flags,
    bound_sessions,
    http_options,
    run_stop_hooks,
    scorecard_writer,
)
from aw_mcp.core.errors import UsageError
from aw_mcp.core.model_io import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)
from aw_mcp.importers.import_log import ImportLog
from aw_mcp.importers.mcp_catalog import Catalog, world_from_catalog
from aw_mcp.importers.world_file import world_yaml
from aw_mcp.protocol.server import WorldApp, listen_socket, serve_http, serve_stdio
from aw_mcp.sim.mirror import INSTRUCTED_KINDS, MirrorSimulator
from aw_mcp.sim.shadow import DEFAULT_CONCURRENCY, Shadow
from aw_mcp.sim.world_setup import add_backend_flags, add_preset_flag, setup_world

EPILOG = """\
examples:
  aw-mcp mirror --record run.jsonl -- npx -y @modelcontextprotocol/server-memory
      an agent talks to the real memory server through aw-mcp; every call lands in run.jsonl
  aw-mcp mirror --preset flaky:probability=0.3 --scorecard card.json -- mcp-server-time
      the real server's answers, with faults, graded as on a simulated world
  aw-mcp mirror --upstream-url https://example.com/mcp --bearer "$TOKEN" --shadow --base-url http://127.0.0.1:8000/v1
      the world model predicts each real answer beside it; `aw-mcp calibrate run.jsonl` measures how close it is
"""

# The parts of a --world file a mirror takes: the tools are the upstream's.
WORLD_KEYS = ("perturbations", "presets", "seed", "model", "injections", "facts", "clock", "state", "prompts")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mirror",
        help=summary("mirror"),
        description="Serve a real MCP server's tools through aw-mcp: calls forwarded and recorded, faults applied "
        "to the real answers, and with --shadow the world model's prediction of each recorded beside it. "
        "Give the upstream after `--` (a stdio command line) or as --upstream-url.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    upstream = parser.add_argument_group("the upstream server")
    upstream.add_argument("--upstream-url", metavar="URL", help="a Streamable HTTP MCP endpoint to mirror")
    upstream.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="with --upstream-url: an HTTP header sent on every request; repeatable",
    )
    upstream.add_argument(
        "--bearer", metavar="TOKEN", help="with --upstream-url: send `Authorization: Bearer TOKEN`"
    )
    upstream.add_argument(
        "--call-timeout",
        type=float,
        default=DEFAULT_CALL_TIMEOUT_S,
        metavar="SECONDS",
        help=f"the longest the upstream may take to answer a call; past it the agent gets an isError "
        f"(default {DEFAULT_CALL_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--world",
        metavar="FILE",
        help="a world file whose perturbations, presets, seed and model settings apply (its tools are ignored: "
        "the upstream's are served)",
    )
    add_preset_flag(parser)
    shadow = parser.add_argument_group("shadow predictions")
    shadow.add_argument(
        "--shadow",
        action="store_true",
        help="the world model (the model options below, as for serve) predicts each real answer off the agent's "
        "path; recorded beside it for `aw-mcp calibrate`",
    )
    shadow.add_argument(
        "--shadow-concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help=f"predictions running at once at most (default {DEFAULT_CONCURRENCY})",
    )
    add_backend_flags(parser)
    add_transport_flags(parser)
    add_preflight_flag(parser)
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the stdio upstream to start"
    )
    parser.set_defaults(func=run)


def target_of(args: argparse.Namespace) -> UpstreamTarget:
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.upstream_url):
        raise UsageError(
            "aw-mcp mirror needs one upstream: a command line after `--` (aw-mcp mirror -- npx -y "
            "@modelcontextprotocol/server-memory) or --upstream-url URL"
        )
    if command and (args.header or args.bearer):
        raise UsageError("--header and --bearer go with --upstream-url (a stdio upstream takes no headers)")
    headers: dict[str, str] = {}
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header {header!r}: expected 'NAME: VALUE'")
        headers[name.strip()] = value.strip()
    if args.bearer:
        headers["Authorization"] = f"Bearer {args.bearer}"
    return UpstreamTarget(command=tuple(command), url=args.upstream_url, headers=headers)


def faults_of(path: str | None) -> dict[str, Any]:
    """What of a --world file a mirror applies (WORLD_KEYS); the file is validated with the upstream's tools."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--world {path}: cannot read it: {exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--world {path}: not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--world {path}: expected a mapping (a world file), got {type(data).__name__}")
    return {key: data[key] for key in WORLD_KEYS if key in data}


def mirror_world(surface_catalog: Catalog, extra: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The world a mirror serves (its YAML) and each world tool's upstream name."""
    world = world_from_catalog(surface_catalog, ImportLog.to_stderr())
    for tool in world[
        "tools"
    ]:  # a null default (mcp-server-git has them) means no default: the world spec says so
        for key in ("inputSchema", "outputSchema"):
            if isinstance(tool.get(key), dict):
                tool[key] = without_null_defaults(tool[key])
    world.update(extra)
    raw = [t["name"] for t in surface_catalog.tools]
    names = {}
    leftover = [name for name in raw if name not in {t["name"] for t in world["tools"]}]
    for tool in world["tools"]:
        names[tool["name"]] = (
            tool["name"] if tool["name"] in raw else (leftover.pop(0) if leftover else tool["name"])
        )
    return world_yaml(world, f"# mirror of {surface_catalog.source}\n"), names


def without_null_defaults(schema: Any) -> Any:
    """The schema without `default: null` anywhere (a world spec refuses them; a schema means no default)."""
    if isinstance(schema, dict):
        return {
            key: without_null_defaults(value)
            for key, value in schema.items()
            if not (key == "default" and value is None)
        }
    if isinstance(schema, list):
        return [without_null_defaults(item) for item in schema]
    return schema


class NoModel(WorldModel):
    """The world model of a mirror without --shadow: none; only an instructed fault would ask, and those are
    refused at start."""

    name = "none"

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        raise BackendError("aw-mcp mirror has no world model here: pass --shadow with the model options")

    async def aclose(self) -> None:
        return None

    async def preload(self) -> bool:
        return False


def run(args: argparse.Namespace) -> int:
    target = target_of(args)
    options = http_options(args)
    extra = faults_of(args.world)
    label = args.record or args.resume or f"aw-mcp mirror {target.describe()}"
    try:
        return anyio.run(_serve, args, target, options, extra, label)
    finally:
        run_stop_hooks()


async def _serve(
    args: argparse.Namespace, target: UpstreamTarget, options: Any, extra: dict[str, Any], label: str
) -> int:
    async with AsyncExitStack() as stack:
        upstream = await stack.enter_async_context(Upstream(target, call_timeout_s=args.call_timeout))
        try:
            surface = await upstream.surface()
        except UpstreamError as exc:
            raise UsageError(f"aw-mcp mirror: {exc}") from None
        catalog = Catalog(
            source=target.describe(),
            tools=[t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in surface.tools],
            server_name=surface.server_name,
            server_version=surface.server_version,
            instructions=surface.instructions,
        )
        text, names = mirror_world(catalog, extra)
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="aw-mirror-"))
        path = Path(folder) / "mirror.yaml"
        path.write_text(text, encoding="utf-8")
        simulator = _simulator(args, path, upstream, names)
        if simulator.shadow is None and any(
            p.fault.kind in INSTRUCTED_KINDS for p in simulator.perturbations
        ):
            raise UsageError(
                f"faults of kind {' / '.join(INSTRUCTED_KINDS)} have the world model rewrite the real answer: "
                "pass --shadow with the model options"
            )
        bound_sessions(simulator.registry, args)
        app = WorldApp(simulator, text, Passthrough(surface, upstream))
        if args.scorecard:
            _on_stop.append(scorecard_writer(simulator.registry, Path(args.scorecard), label))
        if simulator.shadow is not None:
            await stack.enter_async_context(simulator.shadow.running())
        print(
            f"aw-mcp: mirroring {target.describe()} ({len(simulator.catalog.tools)} tools"
            f"{', shadowed by ' + str(simulator.shadow.model) if simulator.shadow else ''})",
            file=sys.stderr,
            flush=True,
        )
        if args.transport == "http":
            await serve_http(app, options, listen_socket(options.host, options.port))
        else:
            await serve_stdio(app)
    return 0


def _simulator(
    args: argparse.Namespace, world_path: Path, upstream: Upstream, names: dict[str, str]
) -> MirrorSimulator:
    """The world set up as `serve` sets one up (presets, record/resume, the model options), on the mirror's pipeline."""
    args.world = str(world_path)
    args.prompts = getattr(args, "prompts", None)
    if not args.shadow:
        args.backend = args.backend or "demo"  # resolved, never asked: NoModel answers nothing
    setup = setup_world(args, open_model=None if args.shadow else (lambda choice, world: NoModel()))
    base = setup.simulator
    shadow = None
    if args.shadow:
        if args.preflight and not (args.cache and args.cache_mode == "replay-only"):
            preflight(setup.backend, getattr(args, "trust_world_backend", False))
        shadow = Shadow(base.registry, setup.backend.model, args.shadow_concurrency)
    return MirrorSimulator(
        base.world,
        base.backend,
        base.registry,
        base.params,
        base.output_retries,
        base.template,
        base.clock,
        upstream=upstream,
        shadow=shadow,
        names=names,
    )
