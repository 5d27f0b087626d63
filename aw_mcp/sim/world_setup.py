"""From command-line flags to a running simulator: world file, backend choice, recording and resume."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from aw_mcp.backends.answer_cache import CACHE_MODES, DEFAULT_CACHE_MAX_BYTES, AnswerStore, CachedWorldModel
from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.hybrid import HybridWorldModel
from aw_mcp.backends.resolve import BACKENDS, BackendChoice, open_backend, resolve_backend
from aw_mcp.core.errors import UsageError
from aw_mcp.core.model_io import BackendError
from aw_mcp.core.settings import AwSettings, read_settings
from aw_mcp.load.world import load_world
from aw_mcp.prompt.fit import prompt_size_problems
from aw_mcp.prompt.templates import PromptDir, TemplateError, prompt_dir
from aw_mcp.prompt.world_channel import channel
from aw_mcp.sim.registry import ForkPointError, SessionRegistry
from aw_mcp.sim.simulator import Simulator, params_from_settings
from aw_mcp.spec.bundled import resolve_world_path
from aw_mcp.spec.issues import SpecIssue, WorldSpecError
from aw_mcp.spec.presets import PRESET_NAMES, parse_preset
from aw_mcp.spec.world import WorldSpec
from aw_mcp.trajectory.records import TrajectoryWriter

log = logging.getLogger(__name__)


def add_world_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world", required=True, help="world YAML file, or the name of a bundled world")
    parser.add_argument(
        "--prompts",
        metavar="DIR",
        help="prompt templates laid out like prompts/ (<domain>/system_prompt.txt, <domain>/judge_system_prompt.txt);"
        " overrides the world's `prompts:`",
    )


def add_backend_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("world model")
    group.add_argument(
        "--backend",
        choices=BACKENDS,
        help="default: openai when a base URL is set, else local (demo: scripted answers from the world's "
        "examples, labelled as such; never the world model)",
    )
    group.add_argument(
        "--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (AW_BASE_URL)"
    )
    group.add_argument(
        "--model",
        help="model name (openai) or path / hub id / GGUF (local) (AW_MODEL); local `tiny`: a tiny random model "
        "built without weights, to try the engine (its answers are random text)",
    )
    group.add_argument(
        "--replay",
        metavar="TRAJECTORY",
        help="recorded trajectory answering calls (replay: every call; hybrid: the calls it holds, the world model "
        "the rest)",
    )
    group.add_argument("--device", help="local engine device, e.g. cuda, cpu")
    group.add_argument("--dtype", help="local engine dtype, e.g. bfloat16, float32")
    group.add_argument(
        "--max-model-len",
        type=int,
        metavar="TOKENS",
        help="local engine context (prompt + answer); default: the engine's, 32768 tokens (or the checkpoint's own "
        "limit when smaller), on a GPU and a CPU alike; a world that does not fit the one given is refused at start",
    )
    group.add_argument("--seed", type=int, help="override the world's seed")
    group.add_argument("--temperature", type=float, help="override the world's sampling temperature")
    group.add_argument("--max-tokens", type=int, help="override the world's max_tokens")
    thinking = group.add_mutually_exclusive_group()
    thinking.add_argument(
        "--thinking", dest="thinking", action="store_true", default=None, help="let it think"
    )
    thinking.add_argument(
        "--no-thinking", dest="thinking", action="store_false", help="fast mode: no thinking"
    )
    group.add_argument(
        "--trust-world-backend",
        action="store_true",
        help="send AW_API_KEY to a model.base_url given by the world file (by default only to --base-url/AW_BASE_URL)",
    )
    group.add_argument(
        "--cache",
        metavar="DIR",
        help="answer cache: a call whose model, sampling and messages were answered before is answered from DIR "
        "byte for byte (no model asked); a new one asks the model and is stored",
    )
    group.add_argument(
        "--cache-mode",
        choices=CACHE_MODES,
        default="read-write",
        help="with --cache: read-write (default) or replay-only: a miss is an error for that call and no model is "
        "opened (CI without a GPU)",
    )
    group.add_argument(
        "--cache-max-bytes",
        type=int,
        default=DEFAULT_CACHE_MAX_BYTES,
        metavar="BYTES",
        help="with --cache: the folder's bound; the least recently used answers go first (default 1 GiB)",
    )
    group.add_argument("--record", metavar="PATH", help="append one JSON line per call to this trajectory")
    group.add_argument("--resume", metavar="PATH", help="continue the session recorded in this trajectory")
    group.add_argument(
        "--at",
        type=int,
        metavar="K",
        help="with --resume: keep the recorded session's first K calls and continue in a fork of it from there",
    )


def add_preset_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        action="append",
        default=[],
        metavar="NAME[:KEY=VALUE,...]",
        help=f"add a perturbation preset at launch ({', '.join(PRESET_NAMES)}), e.g. flaky:probability=0.3",
    )


def preset_from_flag(flag: str) -> object:
    """`brownout:probability=0.5,cooldown=3` → the preset model (values are read as YAML scalars)."""
    name, _, rest = flag.partition(":")
    data: dict[str, object] = {"name": name.strip()}
    for pair in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--preset {flag}: expected KEY=VALUE, got {pair!r}")
        data[key.strip()] = yaml.safe_load(value)
    try:
        return parse_preset(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "name"
        raise UsageError(f"--preset {flag}: {where}: {first['msg']}") from None


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def reproduce_flags(args: argparse.Namespace, env: AwSettings | None = None) -> list[str]:
    """The flags that set up the same world with the same backend, for a hint that repeats a running command
    (`serve` at a terminal suggests an mcpServers entry and `aw-mcp shell`): the world, its prompts and presets,
    the backend and its settings, and the sampling overrides. Paths are made absolute, since an MCP client starts
    the server in a folder of its own; a backend, base URL or model taken from AW_BACKEND / AW_BASE_URL / AW_MODEL
    is spelled out, since the client's environment may not have them. Never a secret: no API key or auth token,
    and a base URL loses any `user:password@`. Trajectory flags (--record, --resume, --at) are left out: a second
    process appending to the same file is not what a hint should suggest. `env`: the AW_* settings (read now when
    not given)."""
    from aw_mcp.core.redaction import redact_url

    env = read_settings() if env is None else env
    world = str(args.world)
    flags = ["--world", _absolute(world) if Path(world).is_file() else world]
    if getattr(args, "prompts", None):
        flags += ["--prompts", _absolute(args.prompts)]
    for preset in getattr(args, "preset", None) or []:
        flags += ["--preset", preset]
    backend = getattr(args, "backend", None) or env.backend
    base_url = getattr(args, "base_url", None) or env.base_url
    model = getattr(args, "model", None) or env.model
    replay = getattr(args, "replay", None)
    valued: list[tuple[str, object]] = [
        ("--backend", backend),
        ("--base-url", redact_url(base_url) if base_url else None),
        ("--model", model),
        ("--replay", _absolute(replay) if replay else None),
        ("--device", getattr(args, "device", None)),
        ("--dtype", getattr(args, "dtype", None)),
        ("--max-model-len", getattr(args, "max_model_len", None)),
        ("--seed", getattr(args, "seed", None)),
        ("--temperature", getattr(args, "temperature", None)),
        ("--max-tokens", getattr(args, "max_tokens", None)),
    ]
    flags += [item for flag, value in valued if value is not None for item in (flag, str(value))]
    thinking = getattr(args, "thinking", None)
    if thinking is not None:
        flags.append("--thinking" if thinking else "--no-thinking")
    if getattr(args, "trust_world_backend", False):
        flags.append("--trust-world-backend")
    return flags


@dataclass
class WorldOptions:
    """What `aw-mcp serve` takes on its command line to set a world up, as one value (aw_mcp.Env passes one;
    the commands pass their argparse namespace, which has the same attributes)."""

    world: str
    prompts: str | None = None
    backend: str | None = None
    base_url: str | None = None
    model: str | None = None
    replay: str | None = None
    device: str | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    seed: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    thinking: bool | None = None
    trust_world_backend: bool = False
    cache: str | None = None
    cache_mode: str = "read-write"
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES
    record: str | None = None
    resume: str | None = None
    at: int | None = None
    preset: list[str] = field(default_factory=list)


@dataclass
class WorldSetup:
    world: WorldSpec
    spec_text: str
    simulator: Simulator
    prompts: PromptDir
    backend: BackendChoice


def apply_overrides(world: WorldSpec, args: argparse.Namespace) -> WorldSpec:
    model_updates = {
        key: value
        for key, value in (
            ("temperature", getattr(args, "temperature", None)),
            ("max_tokens", getattr(args, "max_tokens", None)),
            ("thinking", getattr(args, "thinking", None)),
        )
        if value is not None
    }
    updates: dict[str, object] = {}
    if model_updates:
        updates["model"] = world.model.model_copy(update=model_updates)
    if getattr(args, "seed", None) is not None:
        updates["seed"] = args.seed
    flags = getattr(args, "preset", None) or []
    if flags:
        updates["presets"] = [*world.presets, *(preset_from_flag(f) for f in flags)]
    if not updates:
        return world
    world = world.model_copy(update=updates)
    problems = world.perturbation_problems() if flags else []
    if problems:
        raise WorldSpecError(
            [SpecIssue("--preset", 0, ".".join(map(str, loc)), msg) for loc, msg in problems]
        )
    return world


def with_context(world: WorldSpec, tokens: int) -> WorldSpec:
    return world.model_copy(update={"model": world.model.model_copy(update={"context_tokens": tokens})})


def context_needed(world: WorldSpec, context: int) -> int | None:
    """None when the world's own text leaves room for a call in `context` tokens; else the smallest context that
    does, rounded up to 1024 (every call would be refused in a smaller one)."""
    if not prompt_size_problems(with_context(world, context)):
        return None
    low, high = context, context * 2
    while prompt_size_problems(with_context(world, high)):
        low, high = high, high * 2
    while high - low > 256:
        middle = (low + high) // 2
        low, high = (low, middle) if not prompt_size_problems(with_context(world, middle)) else (middle, high)
    return -(-high // 1024) * 1024


def too_small(world: WorldSpec, what: str, needed: int, way_out: str) -> UsageError:
    return UsageError(
        f"{what} is too small for world {world.name!r}: its own text (system prompt, tools, facts, state) and room "
        f"for an answer need about {needed:,} tokens of context, so every call would be refused. {way_out}"
    )


def fitted_to_context(world: WorldSpec, context: int) -> WorldSpec:
    """The world with `--max-model-len` as its context (what compaction keeps prompts inside), or a UsageError
    with the context it needs when its own text leaves no room for a call there."""
    needed = context_needed(world, context)
    if needed is not None:
        raise too_small(world, f"--max-model-len {context}", needed, f"Pass --max-model-len {needed} or more")
    return with_context(world, context)


def check_served_context(world: WorldSpec, context: int, server: str) -> None:
    """The context a model server says it serves (`max_model_len` in its /models list) must fit the world."""
    needed = context_needed(world, context)
    if needed is not None:
        raise too_small(
            world,
            f"the model server at {server} serves a context of {context:,} tokens, which",
            needed,
            f"Restart it with a larger context (vLLM: --max-model-len {needed}), or serve a smaller world",
        )


def _open_model(
    args: WorldOptions | argparse.Namespace,
    choice: BackendChoice,
    world: WorldSpec,
    open_model: Callable[[BackendChoice, WorldSpec], WorldModel] | None,
) -> WorldModel:
    """The chosen backend, behind the answer cache when --cache is given (replay-only opens no model at all)."""
    cache, mode = getattr(args, "cache", None), getattr(args, "cache_mode", "read-write")
    if mode not in CACHE_MODES:
        raise UsageError(f"--cache-mode {mode!r}: expected one of {', '.join(CACHE_MODES)}")
    if cache is None and mode != "read-write":
        raise UsageError("--cache-mode replay-only needs --cache DIR: the folder of recorded answers")
    model = _cached_model(args, choice.answering(), world, open_model, cache, mode)
    if choice.backend == "hybrid":  # the recording first, then the (cached) world model
        assert choice.replay_path is not None
        try:
            return HybridWorldModel(choice.replay_path, world, model)
        except BackendError as exc:
            raise UsageError(f"--replay {choice.replay_path}: {exc}") from None
    return model


def _cached_model(
    args: WorldOptions | argparse.Namespace,
    choice: BackendChoice,
    world: WorldSpec,
    open_model: Callable[[BackendChoice, WorldSpec], WorldModel] | None,
    cache: str | None,
    mode: str,
) -> WorldModel:
    inner: WorldModel | None = None
    if cache is None or mode == "read-write":
        if open_model is not None:
            inner = open_model(choice, world)
        else:
            inner = open_backend(choice, world.model, world, getattr(args, "trust_world_backend", False))
    if cache is None:
        assert inner is not None
        return inner
    try:
        store = AnswerStore(cache, getattr(args, "cache_max_bytes", DEFAULT_CACHE_MAX_BYTES))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--cache {cache}: {exc}") from None
    return CachedWorldModel(inner, store, choice.model, mode)


def setup_world(
    args: WorldOptions | argparse.Namespace,
    open_model: Callable[[BackendChoice, WorldSpec], WorldModel] | None = None,
) -> WorldSetup:
    """Raises WorldSpecError / BackendConfigError / TrajectoryFormatError with a user-facing message.
    `open_model`: how to get the backend for the chosen one (aw_mcp.Env shares one among its envs)."""
    path = resolve_world_path(args.world)
    world = apply_overrides(load_world(path), args)
    prompts = prompt_dir(getattr(args, "prompts", None), world.prompts, Path(path))
    template = prompts.load(world.domain)  # an unknown {slot} or a missing file stops us here, not at a call
    too_big = [] if prompts.bundled else prompt_size_problems(world, template)
    if too_big:  # every call would be refused: said now, as `validate` says it
        raise TemplateError(f"{prompts.path(world.domain)}: {too_big[0][1]}")
    placed = None if prompts.bundled else channel(template, world.domain)
    if placed is not None:  # the official templates: the world goes where they have a channel for it
        log.info("%s has no slot for part of the world: it goes into %s", prompts.path(world.domain), placed)
    choice = resolve_backend(
        world.model,
        backend=args.backend,
        base_url=args.base_url,
        model=args.model,
        replay_path=args.replay,
        device=args.device,
        dtype=args.dtype,
        max_model_len=getattr(args, "max_model_len", None),
    )
    if choice.answering().backend == "local" and choice.max_model_len is not None:
        world = fitted_to_context(world, choice.max_model_len)
    at = getattr(args, "at", None)
    if at is not None and not args.resume:
        raise UsageError("--at K needs --resume TRAJECTORY: the recorded session to continue from")
    if args.resume and not Path(args.resume).is_file():  # checked before the writer creates the file
        raise UsageError(
            f"--resume {args.resume}: no such trajectory (--resume continues a recorded one). To start a new "
            f"recording there, pass --record {args.resume} instead"
        )
    record_path = args.record or args.resume
    writer = TrajectoryWriter(record_path) if record_path else None
    registry = SessionRegistry(world, writer)
    if args.resume:
        try:
            registry.resume(args.resume, at=at)
        except ForkPointError as exc:
            raise UsageError(str(exc)) from None
    backend = _open_model(args, choice, world, open_model)
    simulator = Simulator(world, backend, registry, params_from_settings(world.model), template=template)
    return WorldSetup(world, Path(path).read_text(encoding="utf-8"), simulator, prompts, choice)
