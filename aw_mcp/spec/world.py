"""WorldSpec: the pydantic model of a YAML world (tools, facts, state, model settings, perturbations) and the checks
that need only the world itself. Reading a file into one, with every check, is `aw_mcp/load/world.py`."""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import re
from datetime import date, datetime
from functools import cached_property
from typing import Any, Literal

import jsonschema
from pydantic import Field, ValidationError, field_validator, model_validator

from aw_mcp.core.strict_model import StrictSpecModel, http_url
from aw_mcp.spec.check_budget import CheckBudgetError, best_problem, non_finite_at
from aw_mcp.spec.domains import BUILTIN_TOOLS, LEGACY_TOOLS, SCREEN_DOMAINS, TASK_DOMAINS, Domain
from aw_mcp.spec.faults import CatalogFault, ErrorFault, InjectFault, Perturbation, check_names_unique
from aw_mcp.spec.injections import BUILTIN_INJECTIONS, InjectionSlot
from aw_mcp.spec.issues import clean_loc, expected
from aw_mcp.spec.presets import PresetRef, expand_presets, normalize_preset
from aw_mcp.spec.schema_check import SchemaCheck, dangling_ref, json_problem, ref_problem
from aw_mcp.spec.shared_defs import with_defs
from aw_mcp.spec.source import PathKey

TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")  # MCP 2025-11-25 (SEP-986): 1-128 of these characters
MAX_WORLD_NAME_CHARS = 128  # the server's name (`aw-mcp:<name>`), as long as a tool name may be
MAX_PROBLEM_CHARS = 300  # a schema error quoting a huge argument value is cut to this length


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


@functools.lru_cache(maxsize=4096)
def _metaschema_problem_of(text: str) -> str | None:
    """Where and why the schema (as JSON text) breaks the 2020-12 metaschema, or None. Cached: a world's shared
    `$defs` reach many tools (spec/shared_defs.py), and each is checked once."""
    try:
        jsonschema.Draft202012Validator.check_schema(json.loads(text))
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"at {where}: {exc.message}"
    except RecursionError:
        return "nested too deeply to check"
    return None


def metaschema_problem(schema: Any) -> str | None:
    """The metaschema check of a schema, its `$defs` entries checked one by one (the same result, cached)."""
    defs = schema.get("$defs") if isinstance(schema, dict) else None
    if isinstance(defs, dict):
        for name, sub in defs.items():
            problem = _metaschema_problem_of(json.dumps(sub, sort_keys=True))
            if problem is not None:
                return problem.replace("at ", f"at $defs/{name}/", 1).replace("/(root)", "")
        schema = {k: v for k, v in schema.items() if k != "$defs"}
    return _metaschema_problem_of(json.dumps(schema, sort_keys=True))


def _check_schema(schema: dict[str, Any], what: str) -> dict[str, Any]:
    not_json = json_problem(schema)
    if not_json is not None:
        raise ValueError(f"{what} must be JSON: {not_json}")
    problem = metaschema_problem(schema)
    if problem == "nested too deeply to check":
        raise ValueError(f"{what} is nested too deeply to check")
    if problem is not None:
        raise ValueError(f"{what} is not a valid JSON Schema (2020-12) {problem}")
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
    def _input_check(self) -> SchemaCheck:
        return SchemaCheck(self.inputSchema)

    @cached_property
    def _refuses_null(self) -> frozenset[str]:
        from aw_mcp.spec.null_arguments import refused_nulls  # a leaf module; computed once per tool

        return refused_nulls(self.inputSchema)

    def without_refused_nulls(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments with an explicit `null` for an optional argument whose schema has no null type left out:
        treated as absent, as clients that send null for every argument they leave out mean it (mcp-use). Every
        other check of the schema is unchanged (a null for a required argument, or nested, is still refused)."""
        if not any(value is None for value in arguments.values()):
            return arguments
        return {k: v for k, v in arguments.items() if not (v is None and k in self._refuses_null)}

    @cached_property
    def _output_check(self) -> SchemaCheck | None:
        return SchemaCheck(self.outputSchema) if self.outputSchema is not None else None

    def argument_problems(self, arguments: dict[str, Any]) -> list[str]:
        """Every inputSchema violation, each naming the field it concerns (empty when the arguments are valid).
        A message quoting a long value is cut: the agent needs the field and the rule, not its own payload. A
        NaN or infinite number is refused first (JSON has none; the trajectory could not record it), and a check
        past its budget (spec/check_budget.py) is one problem naming the keyword it stopped at."""
        odd = non_finite_at(arguments)
        if odd is not None:
            path, number = odd
            where = ".".join(map(str, path))
            return [f"field `{_cut(where)}`: {number!r} is not a JSON number (JSON has no NaN or Infinity)"]
        try:
            found = self._input_check.errors(arguments)
            errors = sorted(found, key=lambda e: list(map(str, e.absolute_path)))
        except RecursionError:
            return ["the arguments are nested too deeply to check"]
        except CheckBudgetError as exc:
            return [f"the arguments could not be checked against inputSchema: {exc}"]
        problems = []
        for error in errors:
            where = ".".join(str(p) for p in error.absolute_path)
            message = _cut(error.message)
            problems.append(f"field `{_cut(where)}`: {message}" if where else message)
        return list(dict.fromkeys(problems))  # one subschema reached twice (`allOf`) says it once

    def output_problem(self, value: Any) -> str | None:
        """Why a structured result breaks outputSchema (`at PATH: message`), or None when it fits (or no schema)."""
        if self._output_check is None:
            return None
        try:
            found = best_problem(self._output_check.errors(value))
        except RecursionError:
            return "at (root): the value is nested too deeply to check"
        except CheckBudgetError as exc:
            return f"at (root): the value could not be checked: {exc}"
        if found is None:
            return None
        bad, path = found
        return f"at {_cut('/'.join(str(p) for p in path) or '(root)')}: {_cut(bad.message)}"

    @property
    def structured(self) -> bool:
        return self.outputSchema is not None

    def wire(self) -> dict[str, Any]:
        """The MCP `Tool` object (camelCase wire names)."""
        schema = self.inputSchema
        if "properties" not in schema:  # valid without it, but clients index it (smolagents' adapter crashed)
            schema = {**schema, "properties": {}}
        out: dict[str, Any] = {"name": self.name, "description": self.description, "inputSchema": schema}
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
    # (aw_mcp/prompt/constraint.py); post-hoc validation and output_retries still apply.
    constrained: bool = Field(default=True, strict=True)
    # The consistency guard (aw_mcp/sim/consistency.py): each answer checked against what the session established.
    # flag: contradictions recorded; resample: up to max_resamples more answers drawn, the first consistent one
    # kept; off: no check.
    on_contradiction: Literal["flag", "resample", "off"] = "flag"
    max_resamples: int = Field(default=2, ge=1, le=10, strict=True)

    _http_url = field_validator("base_url")(http_url)

    @field_validator("on_contradiction", mode="before")
    @classmethod
    def _off_unquoted(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

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
    # Schemas the tools share, each written once: a tool schema's `$ref: "#/$defs/NAME"` names one. Each tool
    # schema gets the ones it uses as its own `$defs` when the world loads (an MCP tool schema stands alone).
    defs: dict[str, dict[str, Any] | bool] = Field(default_factory=dict, alias="$defs")
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

    @field_validator("defs")
    @classmethod
    def _valid_defs(cls, defs: dict[str, Any]) -> dict[str, Any]:
        for name, schema in defs.items():
            problem = json_problem(schema)
            if problem is not None:
                raise ValueError(f"{name} must be JSON: {problem}")
            problem = metaschema_problem(schema)
            if problem is not None:
                raise ValueError(f"{name} is not a valid JSON Schema (2020-12) {problem}")
        return defs

    @model_validator(mode="before")
    @classmethod
    def _tools_use_shared_defs(cls, data: Any) -> Any:
        """Each tool schema gets the shared `$defs` it uses (spec/shared_defs.py)."""
        defs = data.get("$defs") if isinstance(data, dict) else None
        if not isinstance(defs, dict) or not defs or not isinstance(data.get("tools"), list):
            return data
        tools = []
        for entry in data["tools"]:
            if isinstance(entry, dict):
                entry = {
                    **entry,
                    **{k: with_defs(entry[k], defs) for k in ("inputSchema", "outputSchema") if k in entry},
                }
            tools.append(entry)
        return {**data, "tools": tools}

    @model_validator(mode="before")
    @classmethod
    def _builtin_tools(cls, data: Any) -> Any:
        """Non-MCP domains start from their built-in tools; a `tools:` entry naming one is merged over it (e.g. to
        add `examples:`), one naming a legacy tool of the domain (domains.LEGACY_TOOLS) brings that tool, merged the
        same way, and other entries are added after them."""
        domain = data.get("domain", "mcp") if isinstance(data, dict) else None
        if not isinstance(domain, str) or domain not in BUILTIN_TOOLS:
            return data
        own = data.get("tools") or []
        if not isinstance(own, list):
            return data  # let field validation report the type error
        merged = copy.deepcopy(BUILTIN_TOOLS[data["domain"]])
        by_name = {tool["name"]: tool for tool in merged}
        legacy = {tool["name"]: tool for tool in LEGACY_TOOLS.get(domain, [])}
        for entry in own:
            name = entry.get("name") if isinstance(entry, dict) else None
            if name in by_name:
                by_name[name].update(entry)
            elif name in legacy:
                merged.append({**copy.deepcopy(legacy[name]), **entry})
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
                        where = (*("perturbations", i, "fault", "add", j), *clean_loc(tuple(first["loc"])))
                        problems.append((where, expected(first)))
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
