"""A world file read and checked whole: its spec (`aw_mcp/spec/`), then what only the prompt layer can tell (does
the world's own text fit the model's context, what constrained decoding cannot enforce). Every problem is a
`file:line: field: what was expected` line (`WorldSpecError`), never a traceback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aw_mcp.prompt.constraint import relaxation_warnings
from aw_mcp.prompt.fit import prompt_size_problems
from aw_mcp.prompt.templates import TemplateError, prompt_dir
from aw_mcp.spec.faults import CatalogFault
from aw_mcp.spec.issues import SpecIssue, WorldSpecError, clean_loc, expected, field_path
from aw_mcp.spec.schema_check import keyword_problems, regex_problems
from aw_mcp.spec.source import PathKey, SpecSource, SpecSyntaxError, parse_yaml, read_yaml
from aw_mcp.spec.world import WorldSpec

log = logging.getLogger(__name__)


def world_from_source(source: SpecSource, size_check: bool = True) -> WorldSpec:
    """The validated world; raises WorldSpecError for every problem (never another exception). `size_check`
    False: a world too large for its context passes (prompt/fit.py; the importer warns about it instead)."""
    try:
        return _world_from_source(source, size_check)
    except WorldSpecError:
        raise
    except RecursionError:
        raise WorldSpecError([SpecIssue(source.path, 1, "(world)", "nested too deeply to check")]) from None
    except Exception as exc:  # a validator bug must still read as a file:line message, never a traceback
        message = f"could not be checked ({type(exc).__name__}: {exc})"
        raise WorldSpecError([SpecIssue(source.path, 1, "(world)", message)]) from None


def schema_issues(source: SpecSource, world: WorldSpec) -> list[SpecIssue]:
    """Keywords in the tools' JSON Schemas: null values are errors, unknown keywords warnings."""
    issues = []
    for i, tool in enumerate(world.tools):
        for key in ("inputSchema", "outputSchema"):
            schema = getattr(tool, key)
            for pointer, message, is_error in keyword_problems(schema):
                loc: PathKey = ("tools", i, key, *pointer)
                issues.append(
                    SpecIssue(
                        source.path,
                        source.locate(loc)[0],
                        field_path(("tools", i, key)),
                        message,
                        "error" if is_error else "warning",
                    )
                )
    return issues + regex_issues(source, world) + grammar_issues(source, world)


def regex_issues(source: SpecSource, world: WorldSpec) -> list[SpecIssue]:
    """Warnings: regexes RE2 cannot take (schema_check.regex_problems), in the tools and the tools a catalog
    fault adds; each is then matched under a time budget or not at all, never without bound."""
    schemas: list[tuple[PathKey, Any]] = []
    for i, tool in enumerate(world.tools):
        schemas += [(("tools", i, key), getattr(tool, key)) for key in ("inputSchema", "outputSchema")]
    for i, perturbation in enumerate(world.perturbations):
        if isinstance(perturbation.fault, CatalogFault):
            for j, entry in enumerate(perturbation.fault.add):
                here = ("perturbations", i, "fault", "add", j)
                schemas += [((*here, key), entry.get(key)) for key in ("inputSchema", "outputSchema")]
    issues = []
    for where, schema in schemas:
        for pointer, message in regex_problems(schema):
            line = source.locate((*where, *pointer))[0]
            issues.append(SpecIssue(source.path, line, field_path(where), message, "warning"))
    return issues


def load_issues(source: SpecSource) -> list[SpecIssue]:
    """Every error and warning of one parsed world file (an empty list: valid and clean)."""
    try:
        world = world_from_source(source)
    except WorldSpecError as exc:
        return list(exc.issues)
    return schema_issues(source, world) + prompt_issues(source, world)


def prompt_issues(source: SpecSource, world: WorldSpec) -> list[SpecIssue]:
    """The world's own `prompts:` folder, read as `serve` reads it (the template it would load, every slot
    checked): a folder `serve` would refuse is an error here too, at the `prompts:` line."""
    if world.prompts is None:
        return []
    line = source.locate(("prompts",))[0]
    try:
        prompts = prompt_dir(None, world.prompts, Path(source.path))
        template = prompts.load(world.domain)
    except TemplateError as exc:
        message = str(exc).removeprefix(f"{source.path}: prompts: ")  # the issue names file and field itself
        return [SpecIssue(source.path, line, "prompts", message)]
    too_big = [] if prompts.bundled else prompt_size_problems(world, template)  # as serve checks it
    if too_big:
        message = f"with {prompts.path(world.domain)}: {too_big[0][1]}"
        return [SpecIssue(source.path, line, "prompts", message)]
    # A template without slots for the world still gets it (prompt/world_channel.py): nothing to warn about.
    return []


def _world_from_source(source: SpecSource, size_check: bool = True) -> WorldSpec:
    if not isinstance(source.data, dict):
        raise WorldSpecError(
            [SpecIssue(source.path, 1, "(world)", "expected a mapping with at least `name:`")]
        )
    try:
        world = WorldSpec.model_validate(source.data)
    except ValidationError as exc:
        issues = []
        for error in exc.errors():
            loc = clean_loc(tuple(error["loc"]), source.data)
            line, _ = source.locate(loc)
            issues.append(SpecIssue(source.path, line, field_path(loc), expected(error)))
        raise WorldSpecError(issues) from None
    problems = world.format_problems() + world.perturbation_problems()
    if size_check:  # the importer writes a world too large for its context, with a warning instead
        problems += prompt_size_problems(world)
    issues = [SpecIssue(source.path, source.locate(loc)[0], field_path(loc), msg) for loc, msg in problems]
    issues += [i for i in schema_issues(source, world) if i.severity == "error"]
    if issues:
        raise WorldSpecError(issues)
    return world


def load_world(path: str | Path) -> WorldSpec:
    """Read and validate a world file. Raises WorldSpecError (never a raw traceback-worthy exception)."""
    try:
        source = read_yaml(path)
    except SpecSyntaxError as exc:
        raise WorldSpecError([SpecIssue(exc.path, exc.line, "(file)", exc.message)]) from None
    world = world_from_source(source)
    # `aw-mcp validate` prints these with the other warnings; `serve` and the other commands log them.
    for issue in regex_issues(source, world) + grammar_issues(source, world):
        log.warning("%s", issue)
    return world


def grammar_issues(source: SpecSource, world: WorldSpec) -> list[SpecIssue]:
    """Warnings: what constrained decoding (`model.constrained`) cannot enforce in the tools' output schemas."""
    if not world.model.constrained:
        return []
    issues = []
    for i, tool in enumerate(world.tools):
        for pointer, message in relaxation_warnings(tool):
            loc: PathKey = ("tools", i, "outputSchema", *pointer)
            field = field_path(("tools", i, "outputSchema"))
            issues.append(
                SpecIssue(
                    source.path, source.locate(loc)[0], field, f"tool {tool.name}: {message}", "warning"
                )
            )
    return issues


def load_world_text(text: str, path: str = "<string>", size_check: bool = True) -> WorldSpec:
    try:
        source = parse_yaml(text, path)
    except SpecSyntaxError as exc:
        raise WorldSpecError([SpecIssue(exc.path, exc.line, "(file)", exc.message)]) from None
    return world_from_source(source, size_check)


def validate_paths(paths: list[str | Path]) -> list[SpecIssue]:
    """Every problem in every file, errors and warnings (an empty list means all valid and clean)."""
    issues: list[SpecIssue] = []
    for path in paths:
        try:
            source = read_yaml(path)
        except SpecSyntaxError as exc:
            issues.append(SpecIssue(exc.path, exc.line, "(file)", exc.message))
            continue
        issues.extend(load_issues(source))
    return issues
