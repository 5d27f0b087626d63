"""From imported tool dicts to a world file that `aw-mcp validate` accepts, written as editable YAML.

Every importer ends here: tools are fitted to the world spec (adapted where possible, degraded with a warning where
not), the whole world is validated by the same loader `aw-mcp validate` uses, and only then written.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from pydantic import ValidationError

from aw_mcp.core.errors import UserError
from aw_mcp.importers.import_log import ImportLog
from aw_mcp.load.world import world_from_source
from aw_mcp.prompt.fit import prompt_size_problems
from aw_mcp.spec.issues import WorldSpecError
from aw_mcp.spec.schema_check import dangling_ref
from aw_mcp.spec.shared_defs import with_defs
from aw_mcp.spec.source import MAX_EXPANDED_NODES, SpecSyntaxError, parse_yaml
from aw_mcp.spec.world import ToolSpec

WORLD_KEY_ORDER = ("name", "description", "domain", "seed", "now", "facts", "state", "tools", "$defs")
TOOL_KEY_ORDER = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "outputWrapper",
    "annotations",
    "examples",
    "errors",
)
# Keywords that belong at the root of a schema document: `$ref`s inside point at them, so wrapping must hoist them.
_ROOT_ONLY = ("$schema", "$id", "$defs", "definitions")


class ImportFailure(UserError, ValueError):
    """The source cannot be imported at all (not an OpenAPI document, unreadable, ...): one clear message."""


def tool_name(raw: str, fallback: str = "tool") -> str:
    """A valid MCP tool name (`[A-Za-z0-9_.-]{1,128}`) as close to `raw` as possible."""
    name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", raw).strip("_") or fallback
    return name[:128]


def unique_name(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        suffix = f"_{n}"
        candidate, n = name[: 128 - len(suffix)] + suffix, n + 1
    taken.add(candidate)
    return candidate


def _object_like(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    if "type" in schema:
        return schema["type"] == "object"
    if "properties" in schema or "additionalProperties" in schema or "patternProperties" in schema:
        return True
    branches = [b for key in ("allOf", "oneOf", "anyOf") for b in schema.get(key, [])]
    return bool(branches) and all(_object_like(b) for b in branches)


def fit_output_schema(schema: Any) -> tuple[dict[str, Any], str | None]:
    """An object-rooted output schema (MCP 2025 clients reject others) and the wrapper property, if one was needed.

    A non-object result (an array, a string, a nullable object) goes under one property: `items` for arrays,
    `result` otherwise; the simulator wraps the model's raw answer the same way (`ToolSpec.outputWrapper`)."""
    if _object_like(schema):
        return {"type": "object", **schema}, None
    inner = copy.deepcopy(schema) if isinstance(schema, dict | bool) else {}
    root: dict[str, Any] = {}
    if isinstance(inner, dict):
        root = {key: inner.pop(key) for key in _ROOT_ONLY if key in inner}
    wrapper = "items" if isinstance(inner, dict) and inner.get("type") == "array" else "result"
    return {**root, "type": "object", "properties": {wrapper: inner}, "required": [wrapper]}, wrapper


def ordered_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Keys in the order a human reads a tool; empty optional parts left out."""
    out = {key: tool[key] for key in TOOL_KEY_ORDER if tool.get(key) not in (None, "", [], {})}
    out.update({k: v for k, v in tool.items() if k not in TOOL_KEY_ORDER and v not in (None, "", [], {})})
    return out


def _spec_problem(tool: dict[str, Any], defs: dict[str, Any] | None = None) -> str | None:
    """Why the world spec rejects `tool` (its schemas given the shared `defs` they use), or None."""
    if defs:
        tool = {**tool, **{k: with_defs(tool[k], defs) for k in ("inputSchema", "outputSchema") if k in tool}}
    for key in ("inputSchema", "outputSchema"):
        bad = dangling_ref(tool.get(key))
        if bad is not None:
            return f"{key}: $ref {bad!r} points at nothing"
    try:
        ToolSpec.model_validate(tool)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where + ': ' if where else ''}{str(first['msg']).removeprefix('Value error, ')}"
    except Exception as exc:  # jsonschema reference errors are not ValueErrors; they must not end the import
        return f"{type(exc).__name__}: {exc}"
    return None


def fit_tool(
    tool: dict[str, Any], log: ImportLog, pointer: str, defs: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The tool in a shape the world spec accepts, or None (with a warning) when even a bare version fails.

    Examples are checked one by one (a bad one is skipped, the others kept). A tool rejected without them
    gives up its output schema (unless only the input schema is at fault) and then its input schema, each with a
    warning naming why."""
    tool = ordered_tool(tool)
    examples = tool.pop("examples", [])
    problem = _spec_problem(tool, defs)
    free_form = {"type": "object"}
    if (
        problem
        and "outputSchema" in tool
        and _spec_problem({**tool, "inputSchema": free_form}, defs) is not None
    ):
        log.warn(pointer, f"output schema dropped, the world spec rejects it ({problem})")
        tool.pop("outputSchema")
        tool.pop("outputWrapper", None)
        problem = _spec_problem(tool, defs)
    if problem and "inputSchema" in tool:
        log.warn(
            pointer, f"input schema replaced by a free-form object, the world spec rejects it ({problem})"
        )
        tool["inputSchema"] = free_form
        problem = _spec_problem(tool, defs)
    if problem:
        log.warn(pointer, f"tool {tool.get('name')!r} skipped: {problem}")
        return None
    kept = []
    for i, example in enumerate(examples):
        bad = _spec_problem({**tool, "examples": [example]}, defs)
        if bad:
            log.warn(pointer, f"example {i + 1} skipped: {bad.removeprefix('examples[0].')}")
        else:
            kept.append(example)
    return ordered_tool({**tool, "examples": kept})


def check_schema(schema: Any) -> str | None:
    """Why `schema` is not a valid 2020-12 schema, or None."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"at {where}: {exc.message}"
    return None


class _WorldDumper(yaml.SafeDumper):
    """Block style for multi-line text, no anchors/aliases (a schema reached twice is written out twice)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text.strip("\n") else None
    if style:
        text = "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


def _short_scalar(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, bool | int | float)
        or (isinstance(value, str) and "\n" not in value)
    )


def _flow_fits(items: list[Any]) -> bool:
    """Short lists and maps of plain scalars read best on one line, as people write them: `[open, closed]`."""
    return all(_short_scalar(v) for v in items) and sum(len(str(v)) + 2 for v in items) <= 60


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    return dumper.represent_sequence(
        "tag:yaml.org,2002:seq", data, flow_style=bool(data) and _flow_fits(data)
    )


def _represent_dict(dumper: yaml.SafeDumper, data: dict[Any, Any]) -> yaml.Node:
    flow = bool(data) and len(data) <= 4 and _flow_fits([*data.keys(), *data.values()])
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flow)


_WorldDumper.add_representer(str, _represent_str)
_WorldDumper.add_representer(list, _represent_list)
_WorldDumper.add_representer(dict, _represent_dict)


def world_yaml(world: dict[str, Any], header: str = "") -> str:
    ordered = {key: world[key] for key in WORLD_KEY_ORDER if world.get(key) not in (None, "", [], {})}
    ordered.update({k: v for k, v in world.items() if k not in WORLD_KEY_ORDER})
    body = yaml.dump(
        ordered, Dumper=_WorldDumper, sort_keys=False, allow_unicode=True, width=110, default_flow_style=False
    )
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + body


def yaml_nodes(value: Any) -> int:
    """The nodes a world's YAML has (a mapping, each key and value, each item), as the loader counts them."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            count += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def finish_world(
    world: dict[str, Any], out: str | Path | None, header: str, log: ImportLog, subset: str = ""
) -> str:
    """Validate exactly the text that will be written, then write it (or return it for stdout when `out` is
    None). A world too large for the default context is written with a warning (`subset`: how to import fewer
    tools); one too large for a world file at all (its YAML nodes, bytes or text) is refused, naming the same way
    out; any other failure is an importer bug, reported with the validator's file:line messages."""
    nodes = yaml_nodes(world)
    if nodes > MAX_EXPANDED_NODES:
        raise ImportFailure(
            f"the world would have {nodes:,} YAML nodes ({len(world.get('tools', []))} tools), more than a world "
            f"file may hold ({MAX_EXPANDED_NODES:,}). {subset or 'Import fewer tools.'}"
        )
    text = world_yaml(world, header)
    label = str(out) if out is not None else "<import>"
    try:  # the loader's bounds (file bytes, text after aliases): what `validate` would refuse is not written
        source = parse_yaml(text, label)
    except SpecSyntaxError as exc:
        raise ImportFailure(
            f"the world would be too large for a world file ({len(world.get('tools', []))} tools): {exc.message}. "
            f"{subset or 'Import fewer tools.'}"
        ) from None
    try:
        spec = world_from_source(source, size_check=False)
    except WorldSpecError as exc:
        raise ImportFailure(
            f"the imported world does not validate (an importer bug, please report it):\n{exc}"
        ) from None
    for _, problem in prompt_size_problems(spec):
        log.warn(label, f"{problem}{'. ' + subset if subset else ''}")
    if out is not None:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return text


def check_writable(out: str | Path | None, force: bool) -> None:
    if out is not None and Path(out).exists() and not force:
        raise ImportFailure(f"{out} exists; pass --force to overwrite it (hand edits in it would be lost)")
