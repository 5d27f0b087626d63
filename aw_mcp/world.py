"""WorldSpec: the pydantic model of a YAML world, and loading with `file:line: field: what was expected` errors."""

from __future__ import annotations

import copy
import fnmatch
import logging
import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import jsonschema
from pydantic import Field, ValidationError, field_validator, model_validator

# prompting.py renders the prompt for the size check; it reads WorldSpec in annotations only (no import cycle)
from aw_mcp import prompting
from aw_mcp.constrained import relaxation_warnings
from aw_mcp.context_budget import CHARS_PER_TOKEN, DEFAULT_CONTEXT_TOKENS, prompt_budget
from aw_mcp.domains import BUILTIN_TOOLS, SCREEN_DOMAINS, TASK_DOMAINS, Domain
from aw_mcp.errors import UserError
from aw_mcp.perturb.injections import BUILTIN_INJECTIONS, InjectionSlot
from aw_mcp.perturb.presets import PresetRef, expand_presets, normalize_preset
from aw_mcp.perturb.spec import CatalogFault, ErrorFault, InjectFault, Perturbation, check_names_unique
from aw_mcp.schema_check import (
    dangling_ref,
    json_problem,
    keyword_problems,
    ref_problem,
    regex_budget,
    regex_problems,
    schema_validator,
)
from aw_mcp.spec_model import StrictSpecModel, http_url
from aw_mcp.spec_source import PathKey, SpecSource, SpecSyntaxError, parse_yaml, read_yaml

log = logging.getLogger(__name__)

TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")  # MCP 2025-11-25 (SEP-986): 1-128 of these characters
MAX_WORLD_NAME_CHARS = 128  # the server's name (`aw-mcp:<name>`), as long as a tool name may be
MAX_PROBLEM_CHARS = 300  # a schema error quoting a huge argument value is cut to this length
FIRST_TURN_CHARS = 600  # a first call's action and framing, beside the system prompt, the screen and the task


class ToolAnnotationsSpec(StrictSpecModel):
    title: str | None = None
    readOnlyHint: bool | None = None
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None


class ToolExample(StrictSpecModel):
    """A demonstration: these arguments gave this result (text, or a JSON value for structured tools)."""

    arguments: dict[str, Any] = Field(default_factory=dict)
    result: Any

    @model_validator(mode="after")
    def _json_values(self) -> ToolExample:
        for key in ("arguments", "result"):
            problem = json_problem(getattr(self, key))
            if problem is not None:
                raise ValueError(f"{key} must be JSON: {problem}")
        return self


class ToolErrorSpec(StrictSpecModel):
    """A named failure the real tool can produce; the world model and the fault injector both use it."""

    name: str
    message: str
    when: str = ""
    status: int | None = Field(default=None, ge=100, le=599)


def _check_schema(schema: dict[str, Any], what: str) -> dict[str, Any]:
    not_json = json_problem(schema)
    if not_json is not None:
        raise ValueError(f"{what} must be JSON: {not_json}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValueError(f"{what} is not a valid JSON Schema (2020-12) at {where}: {exc.message}") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to check") from None
    bad_ref = dangling_ref(schema)
    if bad_ref is not None:
        raise ValueError(f"{what} has a $ref {bad_ref!r} that points at nothing")
    problem = ref_problem(schema)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")
    if schema.get("type") != "object":
        raise ValueError(f"{what} must have `type: object` at its root (MCP clients require an object)")
    return schema


def _cut(text: str) -> str:
    if len(text) <= MAX_PROBLEM_CHARS:
        return text
    return f"{text[:MAX_PROBLEM_CHARS]}… [{len(text) - MAX_PROBLEM_CHARS:,} more characters]"


class ToolSpec(StrictSpecModel):
    """One virtual tool; maps 1:1 to an MCP tool."""

    name: str
    title: str | None = None
    description: str = ""
    inputSchema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "additionalProperties": False}
    )
    outputSchema: dict[str, Any] | None = None
    # The real API returns a non-object (e.g. an array): the model writes that raw value and the server wraps it
    # as {outputWrapper: value} for structuredContent, whose root MCP requires to be an object.
    outputWrapper: str | None = None
    annotations: ToolAnnotationsSpec | None = None
    examples: list[ToolExample] = Field(default_factory=list)
    errors: list[ToolErrorSpec] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not TOOL_NAME.fullmatch(name):
            raise ValueError("a tool name must be 1-128 characters from A-Z a-z 0-9 _ - .")
        return name

    @field_validator("inputSchema")
    @classmethod
    def _valid_input(cls, schema: dict[str, Any]) -> dict[str, Any]:
        return _check_schema(schema, "inputSchema")

    @field_validator("outputSchema")
    @classmethod
    def _valid_output(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if schema is None else _check_schema(schema, "outputSchema")

    @field_validator("errors")
    @classmethod
    def _error_names_unique(cls, errors: list[ToolErrorSpec]) -> list[ToolErrorSpec]:
        names = [e.name for e in errors]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"duplicate error name(s) {', '.join(map(repr, twice))}: error names must be unique"
            )
        return errors

    @model_validator(mode="after")
    def _wrapper_is_a_property(self) -> ToolSpec:
        if self.outputWrapper is not None:
            properties = (self.outputSchema or {}).get("properties", {})
            if self.outputWrapper not in properties:
                raise ValueError(f"outputWrapper {self.outputWrapper!r} must name a property of outputSchema")
        return self

    def wrap_result(self, value: Any) -> Any:
        """The model's raw result in the object shape `outputSchema` describes."""
        if self.outputWrapper is None or (isinstance(value, dict) and set(value) == {self.outputWrapper}):
            return value
        return {self.outputWrapper: value}

    @model_validator(mode="after")
    def _examples_fit_schemas(self) -> ToolSpec:
        for i, example in enumerate(self.examples):
            problems = self.argument_problems(example.arguments)
            if problems:
                raise ValueError(f"examples[{i}].arguments do not match inputSchema: {problems[0]}")
            problem = self.output_problem(self.wrap_result(example.result))
            if problem is not None:
                raise ValueError(f"examples[{i}].result does not match outputSchema {problem}")
        return self

    @cached_property
    def _input_validator(self) -> jsonschema.Draft202012Validator:
        return schema_validator(self.inputSchema)

    @cached_property
    def _output_validator(self) -> jsonschema.Draft202012Validator | None:
        return schema_validator(self.outputSchema) if self.outputSchema is not None else None

    def argument_problems(self, arguments: dict[str, Any]) -> list[str]:
        """Every inputSchema violation, each naming the field it concerns (empty when the arguments are valid).
        A message quoting a long value is cut: the agent needs the field and the rule, not its own payload."""
        try:
            with regex_budget():  # a regex RE2 cannot take gets a bounded time for the whole check
                errors = sorted(
                    self._input_validator.iter_errors(arguments),
                    key=lambda e: list(map(str, e.absolute_path)),
                )
        except RecursionError:
            return ["the arguments are nested too deeply to check"]
        problems = []
        for error in errors:
            where = ".".join(str(p) for p in error.absolute_path)
            message = _cut(error.message)
            problems.append(f"field `{_cut(where)}`: {message}" if where else message)
        return problems

    def output_problem(self, value: Any) -> str | None:
        """Why a structured result breaks outputSchema (`at PATH: message`), or None when it fits (or no schema)."""
        if self._output_validator is None:
            return None
        try:
            with regex_budget():
                bad = jsonschema.exceptions.best_match(self._output_validator.iter_errors(value))
        except RecursionError:
            return "at (root): the value is nested too deeply to check"
        if bad is None:
            return None
        return f"at {_cut('/'.join(str(p) for p in bad.absolute_path) or '(root)')}: {_cut(bad.message)}"

    @property
    def structured(self) -> bool:
        return self.outputSchema is not None

    def wire(self) -> dict[str, Any]:
        """The MCP `Tool` object (camelCase wire names)."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.inputSchema,
        }
        if self.title:
            out["title"] = self.title
        if self.outputSchema is not None:
            out["outputSchema"] = self.outputSchema
        if self.annotations is not None:
            out["annotations"] = self.annotations.model_dump(exclude_none=True)
        return out


class Fact(StrictSpecModel):
    """A statement that is true in this world; optionally only relevant to some tools (names or globs)."""

    text: str
    tools: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"text": data} if isinstance(data, str) else data


# Sampling of the official evaluation (eval.py of QwenLM/Qwen-AgentWorld): temperature 0.6, max_tokens 32768; it sets
# no top_p / top_k, so neither do we unless a world asks (the server's generation config then decides).
DEFAULT_TEMPERATURE = 0.6
DEFAULT_MAX_TOKENS = 32768
MAX_TOKENS_LIMIT = 10_000_000  # no model has a longer context; a bigger number is a typo (1e20)
# Fast mode (no thinking) answers directly; a screen or a JSON result fits in far fewer tokens.
FAST_MAX_TOKENS = 8192


class ModelSettings(StrictSpecModel):
    """Backend settings and sampling; the command line and AW_* env vars override the backend fields."""

    backend: Literal["openai", "local", "replay"] | None = None
    base_url: str | None = None
    model: str | None = None
    temperature: float = Field(default=DEFAULT_TEMPERATURE, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = Field(default=None, ge=-1, le=1_000_000, strict=True)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT, strict=True)
    # The model's context window in tokens (prompt + answer); unset: the backend's, else DEFAULT_CONTEXT_TOKENS.
    context_tokens: int | None = Field(default=None, ge=1024, le=MAX_TOKENS_LIMIT, strict=True)
    thinking: bool = Field(default=True, strict=True)
    # A deadline for one call's generation, all attempts and streaming included.
    timeout_s: float = Field(default=600.0, gt=0, le=86_400, allow_inf_nan=False)
    retries: int = Field(default=3, ge=0, le=20, strict=True)
    output_retries: int = Field(default=2, ge=0, le=10, strict=True)
    # The largest answer (text + reasoning, UTF-8 bytes) a call takes; over it, the call fails naming this setting.
    # 4 MiB (backends/base.py DEFAULT_MAX_ANSWER_BYTES): ~1M tokens of text, 32x the default max_tokens.
    max_answer_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=1024**3, strict=True)
    # Decode a tool with an outputSchema under a grammar (its schema, or an error), valid by construction
    # (aw_mcp/constrained.py); post-hoc validation and output_retries still apply.
    constrained: bool = Field(default=True, strict=True)

    _http_url = field_validator("base_url")(http_url)

    @property
    def token_budget(self) -> int:
        """max_tokens as set, else the official evaluation's 32768 (thinking) or the fast-mode budget."""
        if self.max_tokens is not None:
            return self.max_tokens
        return DEFAULT_MAX_TOKENS if self.thinking else FAST_MAX_TOKENS


class WorldSpec(StrictSpecModel):
    """A simulated world: what the agent sees (tools) and what the world model is told (facts, state, clock)."""

    name: str = Field(min_length=1)  # one line of at most MAX_WORLD_NAME_CHARS (the MCP server's name)
    description: str = ""
    domain: Domain = "mcp"
    seed: int = Field(default=0, strict=True)
    now: str | None = None
    facts: list[Fact] = Field(default_factory=list)
    # The hidden world state, given to the world model in its system prompt.
    state: str | dict[str, Any] | list[Any] | None = None
    # Screen domains: the screen the agent starts on (terminal text, UI or accessibility tree), shown verbatim as
    # the first turn's **Current State:** (android, web, os: until an observation replaces it).
    screen: str | None = None
    # Android, web and OS: the agent's goal, shown on the first turn as its **Task Instruction:**.
    task: str | None = None
    # A directory laid out like `prompts/` (relative to the world file) whose templates replace the bundled ones.
    prompts: str | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    model: ModelSettings = Field(default_factory=ModelSettings)
    # Prompt-injection slots (AgentDojo-style): name -> text, or {text, expect_call}; `inject` faults fill them in.
    injections: dict[str, InjectionSlot] = Field(default_factory=dict)
    perturbations: list[Perturbation] = Field(default_factory=list)
    presets: list[PresetRef] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _one_line_name(cls, name: str) -> str:
        rule = f"a world name (the MCP server's) is one line of at most {MAX_WORLD_NAME_CHARS} characters"
        if len(name) > MAX_WORLD_NAME_CHARS:
            raise ValueError(f"{rule}; this one has {len(name):,}")
        if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
            raise ValueError(f"{rule}; this one holds a control character")
        return name

    @field_validator("presets", mode="before")
    @classmethod
    def _preset_names(cls, value: Any) -> Any:
        return [normalize_preset(v) for v in value] if isinstance(value, list) else value

    @field_validator("now", mode="before")
    @classmethod
    def _iso_clock(cls, value: Any) -> Any:
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, str):
            try:
                datetime.fromisoformat(value)
            except ValueError:
                raise ValueError("expected an ISO 8601 date-time such as 2026-03-01T09:00:00Z") from None
        return value

    @model_validator(mode="before")
    @classmethod
    def _builtin_tools(cls, data: Any) -> Any:
        """Non-MCP domains start from their built-in tools; a `tools:` entry naming one is merged over it (e.g. to
        add `examples:`), other entries are added after them."""
        domain = data.get("domain", "mcp") if isinstance(data, dict) else None
        if not isinstance(domain, str) or domain not in BUILTIN_TOOLS:
            return data
        own = data.get("tools") or []
        if not isinstance(own, list):
            return data  # let field validation report the type error
        merged = copy.deepcopy(BUILTIN_TOOLS[data["domain"]])
        by_name = {tool["name"]: tool for tool in merged}
        for entry in own:
            if isinstance(entry, dict) and entry.get("name") in by_name:
                by_name[entry["name"]].update(entry)
            else:
                merged.append(entry)
        return {**data, "tools": merged}

    @model_validator(mode="after")
    def _tools_present_and_unique(self) -> WorldSpec:
        if not self.tools:
            raise ValueError("a world of domain `mcp` needs at least one tool under `tools:`")
        seen: set[str] = set()
        for tool in self.tools:
            if tool.name in seen:
                raise ValueError(f"duplicate tool name {tool.name!r}: tool names must be unique")
            seen.add(tool.name)
        return self

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def tool_or_added(self, name: str) -> ToolSpec | None:
        """A tool of the world, or one a catalog fault adds during a session (its definition from the fault)."""
        tool = self.tool(name)
        if tool is not None:
            return tool
        for p in self.all_perturbations():
            if isinstance(p.fault, CatalogFault):
                for definition in p.fault.add:
                    if definition.get("name") == name:
                        return ToolSpec.model_validate(definition)
        return None

    def format_problems(self) -> list[tuple[PathKey, str]]:
        """Keys the trained turn format needs or cannot use in this domain, each with its YAML location."""
        problems: list[tuple[PathKey, str]] = []
        if self.domain in SCREEN_DOMAINS and self.screen is None:
            hint = (
                "move `state.screen` to a top-level `screen:`"
                if isinstance(self.state, dict) and "screen" in self.state
                else "add a top-level `screen: |` block holding the screen the agent starts on, verbatim"
            )
            problems.append(
                (
                    ("domain",),
                    f"a `{self.domain}` world needs its initial screen under `screen:` (shown to the world model as "
                    f"the first turn's current state); {hint}. `state:` stays the hidden world state",
                )
            )
        if self.domain not in SCREEN_DOMAINS and self.screen is not None:
            problems.append(
                (
                    ("screen",),
                    f"`screen:` is read only by the screen domains ({', '.join(sorted(SCREEN_DOMAINS))}); "
                    "put what the service holds under `state:`",
                )
            )
        if self.task is not None and self.domain not in TASK_DOMAINS:
            problems.append(
                (
                    ("task",),
                    f"`task:` (the Task Instruction) is read only by the {', '.join(sorted(TASK_DOMAINS))} domains",
                )
            )
        return problems

    def all_perturbations(self) -> list[Perturbation]:
        """The world's own perturbations, then those its presets expand into."""
        return [*self.perturbations, *expand_presets(self.presets)]

    def prompt_size_problems(self) -> list[tuple[PathKey, str]]:
        """The world's own text (its system prompt with the bundled template: description, tools and examples,
        facts, state; plus the first screen and task) must leave room for a call, or every call would be refused.
        Named at its largest part."""
        system = prompting.render_system_prompt(self, self.now or "2026-01-01T00:00:00Z")
        chars = len(system) + len(self.screen or "") + len(self.task or "") + FIRST_TURN_CHARS
        context = self.model.context_tokens or DEFAULT_CONTEXT_TOKENS
        budget = prompt_budget(context, self.model.token_budget)
        needed = int(chars / CHARS_PER_TOKEN)
        if needed <= budget:
            return []
        parts = {
            "description": len(self.description),
            "tools": len(prompting.render_tool_definitions(self) + prompting.render_demonstrations(self)),
            "facts": len(prompting.render_facts(self)),
            "state": len(prompting.render_state(self)),
            "screen": len(self.screen or ""),
            "task": len(self.task or ""),
        }
        largest = max(parts, key=lambda k: parts[k])
        where = "model.context_tokens" if self.model.context_tokens else "the default context"
        return [
            (
                (largest,),
                f"the world's own text needs about {needed:,} tokens of prompt (`{largest}` alone "
                f"{int(parts[largest] / CHARS_PER_TOKEN):,}), more than {where} of {context:,} tokens leaves "
                f"beside the answer ({budget:,}): every call would be refused. Shorten it, or set "
                "`model.context_tokens` to your model's (larger) context",
            )
        ]

    def perturbation_problems(self) -> list[tuple[PathKey, str]]:
        """Checks that need the whole world (tool names, declared errors, slots), each with its YAML location."""
        problems: list[tuple[PathKey, str]] = []
        names = [t.name for t in self.tools]
        added: list[str] = []
        for i, p in enumerate(self.perturbations):
            if isinstance(p.fault, CatalogFault):
                for j, entry in enumerate(p.fault.add):
                    try:
                        added.append(ToolSpec.model_validate(entry).name)
                    except ValidationError as exc:
                        first = exc.errors()[0]
                        where = (*("perturbations", i, "fault", "add", j), *_clean_loc(tuple(first["loc"])))
                        problems.append((where, _expected(first)))
        known = names + added
        for i, p in enumerate(self.perturbations):
            here: PathKey = ("perturbations", i)
            matched = [n for n in known if fnmatch.fnmatchcase(n, p.match.tool)]
            if not matched:
                problems.append(
                    (
                        (*here, "match", "tool"),
                        f"{p.match.tool!r} matches no tool (tools: {', '.join(known)})",
                    )
                )
            fault = p.fault
            if isinstance(fault, ErrorFault) and fault.declared is not None:
                lacking = [n for n in matched if fault.declared not in {e.name for e in self._tool_errors(n)}]
                if lacking:
                    problems.append(
                        (
                            (*here, "fault", "declared"),
                            f"tool(s) {', '.join(lacking)} declare no error named {fault.declared!r}",
                        )
                    )
            if isinstance(fault, InjectFault) and fault.text is None:
                if fault.slot not in self.injections and fault.slot not in BUILTIN_INJECTIONS:
                    slots = sorted({*self.injections, *BUILTIN_INJECTIONS})
                    problems.append(
                        ((*here, "fault", "slot"), f"unknown injection slot (slots: {', '.join(slots)})")
                    )
            if isinstance(fault, CatalogFault):
                for j, name in enumerate(fault.remove):
                    if name not in known:
                        problems.append(((*here, "fault", "remove", j), f"no tool named {name!r}"))
                for name in fault.redescribe:
                    if name not in known:
                        problems.append(((*here, "fault", "redescribe", name), f"no tool named {name!r}"))
                clash = [e.get("name") for e in fault.add if e.get("name") in names]
                if clash:
                    problems.append(((*here, "fault", "add"), f"tool(s) {', '.join(clash)} already exist"))
        for j, preset in enumerate(self.presets):
            if not any(fnmatch.fnmatchcase(n, preset.tools) for n in names):
                problems.append((("presets", j, "tools"), f"{preset.tools!r} matches no tool"))
            slot = getattr(preset, "slot", None)
            if slot is not None and getattr(preset, "text", None) is None:
                if slot not in self.injections and slot not in BUILTIN_INJECTIONS:
                    problems.append((("presets", j, "slot"), "unknown injection slot"))
        everything = self.all_perturbations()
        for i, message in check_names_unique(everything):
            where: PathKey = ("perturbations", i) if i < len(self.perturbations) else ("presets",)
            problems.append((where, message))
        return problems

    def _tool_errors(self, name: str) -> list[ToolErrorSpec]:
        tool = self.tool(name)
        return tool.errors if tool is not None else []


@dataclass(frozen=True)
class SpecIssue:
    path: str
    line: int
    field: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.path}:{self.line}: {prefix}{self.field}: {self.message}"


class WorldSpecError(UserError, ValueError):
    """One or more problems in a world file; `str()` is one `file:line: field: message` line per problem."""

    def __init__(self, issues: list[SpecIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


def _field_path(loc: PathKey) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(world)"


def _expected(error: dict[str, Any]) -> str:
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        return "unknown key (check the spelling; use an `x-` prefix for your own extensions)"
    if error["type"] == "missing":
        return "required field is missing"
    return message.removeprefix("Value error, ")


def _clean_loc(loc: tuple[Any, ...], data: Any = None) -> PathKey:
    """Pydantic inserts union-branch names (e.g. 'str', 'dict[str,any]') and discriminated-union tags (a fault's
    `kind`, a schedule's `mode`) into the location; they are not YAML keys. A tag is recognised as a location
    part that is not a key of the mapping at that point but equals one of its string values."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(part, str) and ("[" in part or part in {"str", "list", "dict"}):
            continue
        if isinstance(node, dict):
            if part in node:
                node = node[part]
            elif isinstance(part, str) and part in {v for v in node.values() if isinstance(v, str)}:
                continue
            else:
                node = None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
        out.append(part)
    return tuple(out)


def world_from_source(source: SpecSource) -> WorldSpec:
    """The validated world; raises WorldSpecError for every problem (never another exception)."""
    try:
        return _world_from_source(source)
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
                        _field_path(("tools", i, key)),
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
            issues.append(SpecIssue(source.path, line, _field_path(where), message, "warning"))
    return issues


def load_issues(source: SpecSource) -> list[SpecIssue]:
    """Every error and warning of one parsed world file (an empty list: valid and clean)."""
    try:
        world = world_from_source(source)
    except WorldSpecError as exc:
        return list(exc.issues)
    return schema_issues(source, world)


def _world_from_source(source: SpecSource) -> WorldSpec:
    if not isinstance(source.data, dict):
        raise WorldSpecError(
            [SpecIssue(source.path, 1, "(world)", "expected a mapping with at least `name:`")]
        )
    try:
        world = WorldSpec.model_validate(source.data)
    except ValidationError as exc:
        issues = []
        for error in exc.errors():
            loc = _clean_loc(tuple(error["loc"]), source.data)
            line, _ = source.locate(loc)
            issues.append(SpecIssue(source.path, line, _field_path(loc), _expected(error)))
        raise WorldSpecError(issues) from None
    problems = world.format_problems() + world.perturbation_problems() + world.prompt_size_problems()
    issues = [SpecIssue(source.path, source.locate(loc)[0], _field_path(loc), msg) for loc, msg in problems]
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
            field = _field_path(("tools", i, "outputSchema"))
            issues.append(
                SpecIssue(
                    source.path, source.locate(loc)[0], field, f"tool {tool.name}: {message}", "warning"
                )
            )
    return issues


def load_world_text(text: str, path: str = "<string>") -> WorldSpec:
    try:
        source = parse_yaml(text, path)
    except SpecSyntaxError as exc:
        raise WorldSpecError([SpecIssue(exc.path, exc.line, "(file)", exc.message)]) from None
    return world_from_source(source)


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
