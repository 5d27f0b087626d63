"""`aw-mcp import openapi`: one tool per OpenAPI 3.0/3.1 operation, the world's prose from `info`, `servers`, tags.

Each tool's `inputSchema` merges the path, query and header parameters with the request body (JSON or form);
its `outputSchema` is the success response's JSON schema (a non-object root wrapped, see `fit_output_schema`);
`examples` pair request and response examples; `errors` list the documented 4xx/5xx responses.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import yaml

from aw_mcp.importers.import_log import ImportLog, child_pointer, json_pointer
from aw_mcp.importers.openapi_schema import OpenAPIDocument
from aw_mcp.importers.world_file import (
    ImportFailure,
    fit_output_schema,
    fit_tool,
    tool_name,
    unique_name,
)
from aw_mcp.spec.shared_defs import used_names

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PARAMETER_PLACES = ("path", "query", "header")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
BODY_PROPERTY = "body"


def read_document(path: str | Path) -> dict[str, Any]:
    """The document as a mapping (YAML is a superset of JSON, so one parser reads both)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFailure(f"cannot read {path}: {exc}") from None
    try:
        # JSON first: a 13 MB JSON document (GitHub's) takes seconds as JSON and minutes as YAML.
        data = json.loads(text)
    except ValueError:
        data = None
    try:
        if data is None:
            data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ImportFailure(
            f"{path} is neither JSON nor YAML{where}: {getattr(exc, 'problem', exc)}"
        ) from None
    if not isinstance(data, dict):
        raise ImportFailure(f"{path}: expected an OpenAPI document (a mapping with `openapi:` and `paths:`)")
    version = str(data.get("openapi", ""))
    if "swagger" in data:
        raise ImportFailure(f"{path} is Swagger {data['swagger']}; convert it to OpenAPI 3 first")
    if not re.match(r"^3\.[01]\.", version + "."):
        raise ImportFailure(f"{path}: `openapi: {version or '(missing)'}` is not OpenAPI 3.0 or 3.1")
    return data


def is_json_media(media: str) -> bool:
    base = media.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json") or base == "*/*" or base.endswith("/json")


def pick_media(content: Any) -> tuple[str, dict[str, Any]] | None:
    """The media type an agent would use: JSON first, then forms, then anything else."""
    if not isinstance(content, dict) or not content:
        return None
    for wanted in (is_json_media, lambda m: m.split(";")[0].strip().lower() in FORM_TYPES, lambda m: True):
        for media, entry in content.items():
            if wanted(media):
                return media, entry if isinstance(entry, dict) else {}
    return None


def slug(text: str, fallback: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", text.lower())
    return "_".join(words)[:60] or fallback


@dataclass(frozen=True)
class OperationFilter:
    """Which operations to import (`--tag`, `--path GLOB`, `--operation ID`, `--max-tools`): an operation is kept
    when it has one of the tags, its path matches one of the globs and its operationId is one of the ids (each
    test only when given); then at most `max_tools` of them, in document order."""

    tags: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    max_tools: int | None = None

    def keeps(self, route: str, operation: dict[str, Any]) -> bool:
        tags = [str(t) for t in operation.get("tags") or []]
        if self.tags and not set(tags) & set(self.tags):
            return False
        if self.paths and not any(fnmatch.fnmatchcase(route, glob) for glob in self.paths):
            return False
        return not self.operations or str(operation.get("operationId")) in self.operations

    @property
    def active(self) -> bool:
        return bool(self.tags or self.paths or self.operations or self.max_tools is not None)


@dataclass
class ToolDraft:
    """One operation on its way to a tool, with the request examples that `_pair_examples` combines."""

    tool: dict[str, Any]
    pointer: str
    tags: list[str]
    parameter_examples: dict[str, Any] = field(default_factory=dict)
    body_property: str | None = None  # None: the body's properties are flattened into the arguments
    body_examples: dict[str, Any] = field(default_factory=dict)  # example name → value


class OpenAPIImporter:
    def __init__(self, data: dict[str, Any], log: ImportLog, only: OperationFilter | None = None):
        self.document = OpenAPIDocument(data, log)
        self.data = data
        self.log = log
        self.only = only or OperationFilter()
        self.names: set[str] = set()

    # --- the world ------------------------------------------------------------------------------------------

    def subset_hint(self) -> str:
        """How to import fewer operations, with this document's largest tags as examples."""
        counts: dict[str, int] = {}
        for item in (self.data.get("paths") or {}).values():
            for method in METHODS:
                operation = item.get(method) if isinstance(item, dict) else None
                for tag in operation.get("tags") or [] if isinstance(operation, dict) else []:
                    counts[str(tag)] = counts.get(str(tag), 0) + 1
        largest = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        tags = ", ".join(f"--tag {tag} ({n} operations)" for tag, n in largest)
        example = f" (this document's largest: {tags})" if tags else ""
        return (
            f"Import a part of the API: --tag TAG{example}, --path GLOB (e.g. '/repos/*'), --operation ID, "
            "each repeatable, or --max-tools N"
        )

    def world(self) -> dict[str, Any]:
        drafts = self._operations()
        defs = self.document.definitions
        tools = []
        for draft in drafts:
            fitted = fit_tool(draft.tool, self.log, draft.pointer, defs)
            if fitted is not None:
                tools.append((draft, fitted))
        if not tools:
            if self.only.active:
                raise ImportFailure(
                    "no operation of the document passes the filters (--tag, --path, --operation)"
                )
            raise ImportFailure("the document has no operation that could become a tool (see the warnings)")
        for key in ("webhooks", "x-webhooks"):
            if self.data.get(key):
                self.log.warn(json_pointer(key), "webhooks are not imported (they are calls the API makes)")
        info = self.data.get("info") if isinstance(self.data.get("info"), dict) else {}
        title = str(info.get("title") or "Imported API")
        return {
            "name": slug(title, "imported_api").replace("_", "-"),
            "description": self._description(info, title),
            "domain": "mcp",
            "facts": self._facts([(d, t["name"]) for d, t in tools]),
            "tools": [tool for _, tool in tools],
            "$defs": self._used_defs([tool for _, tool in tools]),
        }

    def _used_defs(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The component schemas the kept tools use, each once, in first-use order."""
        defs = self.document.definitions
        names: dict[str, None] = {}
        for tool in tools:
            for key in ("inputSchema", "outputSchema"):
                names.update(dict.fromkeys(used_names(tool.get(key), defs)))
        return {name: defs[name] for name in names}

    def _description(self, info: dict[str, Any], title: str) -> str:
        version = f" (version {info['version']})" if info.get("version") else ""
        text = f"{title}{version}, simulated from its OpenAPI description."
        if info.get("description"):
            text += "\n\n" + str(info["description"]).strip()
        return text

    def _facts(self, named: list[tuple[ToolDraft, str]]) -> list[Any]:
        facts: list[Any] = []
        for i, server in enumerate(self._list("servers")):
            if isinstance(server, dict) and server.get("url"):
                about = f" ({server['description']})" if server.get("description") else ""
                facts.append(f"The API is served at {server['url']}{about}.")
            elif not isinstance(server, dict):
                self.log.warn(json_pointer("servers", i), "a server must be an object with `url`; ignored")
        components = self.data.get("components") if isinstance(self.data.get("components"), dict) else {}
        schemes = components.get("securitySchemes")
        for scheme_name, scheme in (schemes if isinstance(schemes, dict) else {}).items():
            scheme, _ = self.document.deref(
                scheme, json_pointer("components", "securitySchemes", scheme_name)
            )
            if isinstance(scheme, dict):
                facts.append(f"Requests authenticate with {self._security(scheme_name, scheme)}.")
        for i, tag in enumerate(self._list("tags")):
            if not isinstance(tag, dict) or not tag.get("name"):
                self.log.warn(json_pointer("tags", i), "a tag must be an object with `name`; ignored")
                continue
            tools = [name for draft, name in named if tag["name"] in draft.tags]
            if tag.get("description") and tools:
                facts.append({"text": f"{tag['name']}: {str(tag['description']).strip()}", "tools": tools})
        return facts

    def _list(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if value is not None and not isinstance(value, list):
            self.log.warn(json_pointer(key), f"`{key}` must be a list; ignored")
        return value if isinstance(value, list) else []

    @staticmethod
    def _security(name: str, scheme: dict[str, Any]) -> str:
        kind = scheme.get("type", "?")
        if kind == "apiKey":
            return f"an API key `{scheme.get('name', name)}` in the {scheme.get('in', 'header')} ({name})"
        if kind == "http":
            return f"HTTP {scheme.get('scheme', 'auth')} authentication ({name})"
        return f"{kind} ({name})"

    # --- operations -----------------------------------------------------------------------------------------

    def _operations(self) -> list[ToolDraft]:
        paths = self.data.get("paths")
        if not isinstance(paths, dict) or not paths:
            raise ImportFailure("the document has no `paths:` (nothing to turn into tools)")
        drafts: list[ToolDraft] = []
        skipped = 0
        for route, item in paths.items():
            item_pointer = json_pointer("paths", route)
            item, item_pointer = self.document.deref(item, item_pointer)
            if not isinstance(item, dict):
                continue
            shared = item.get("parameters") or []
            for method in METHODS:
                operation = item.get(method)
                if not isinstance(operation, dict) or not self.only.keeps(str(route), operation):
                    continue
                if self.only.max_tools is not None and len(drafts) >= self.only.max_tools:
                    skipped += 1
                    continue
                pointer = child_pointer(item_pointer, method)
                try:
                    drafts.append(
                        self._operation(str(route), method, operation, shared, item_pointer, pointer)
                    )
                except (TypeError, AttributeError, KeyError, ValueError) as exc:
                    # A shape the importer did not anticipate: lose this operation, never the import.
                    self.log.warn(
                        pointer, f"operation skipped, it is malformed ({type(exc).__name__}: {exc})"
                    )
        if skipped:
            self.log.warn(
                json_pointer("paths"),
                f"--max-tools {self.only.max_tools}: {skipped} more operation(s) left out",
            )
        return drafts

    def _operation(
        self,
        route: str,
        method: str,
        op: dict[str, Any],
        shared: list[Any],
        item_pointer: str,
        pointer: str,
    ) -> ToolDraft:
        raw_name = str(op.get("operationId") or "")
        fallback = tool_name("_".join([method, *re.findall(r"[A-Za-z0-9.\-]+", route)]), method)
        base = tool_name(raw_name, fallback) if raw_name else fallback
        if raw_name and base != raw_name:
            self.log.warn(pointer, f"operationId {raw_name!r} is not a valid tool name; using {base!r}")
        name = unique_name(base, self.names)
        if name != base:
            self.log.warn(pointer, f"tool name {base!r} is taken by another operation; this one is {name!r}")
        description = str(op.get("description") or op.get("summary") or "").strip()
        if op.get("deprecated"):
            description = f"Deprecated. {description}".strip()
        description = f"{description}\n\nEndpoint: {method.upper()} {route}".strip()
        tool: dict[str, Any] = {"name": name, "title": op.get("summary"), "description": description}
        tags = [str(t) for t in op.get("tags") or []]
        draft = ToolDraft(tool, pointer, tags)
        tool["inputSchema"] = self._input_schema(draft, op, shared, item_pointer, pointer)
        tool["annotations"] = annotations_for(method)
        self._success(draft, op, pointer)
        tool["errors"] = self._errors(op, pointer)
        if op.get("callbacks"):
            self.log.warn(child_pointer(pointer, "callbacks"), "callbacks are not imported")
        return draft

    # --- inputs ---------------------------------------------------------------------------------------------

    def _parameters(
        self, op: dict[str, Any], shared: list[Any], item_pointer: str, pointer: str
    ) -> list[tuple[dict[str, Any], str]]:
        """Path-item parameters overridden by operation parameters with the same name and location."""
        merged: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
        sources = [
            (shared, child_pointer(item_pointer, "parameters")),
            (op.get("parameters") or [], child_pointer(pointer, "parameters")),
        ]
        for params, where in sources:
            if not isinstance(params, list):
                self.log.warn(where, "`parameters` must be a list; ignored")
                continue
            for i, raw in enumerate(params):
                param, at = self.document.deref(raw, child_pointer(where, i))
                if not isinstance(param, dict) or "name" not in param or "in" not in param:
                    if param is not None:
                        self.log.warn(at, "a parameter needs `name` and `in`; ignored")
                    continue
                merged[(str(param["in"]), str(param["name"]))] = (param, at)
        return list(merged.values())

    def _input_schema(
        self, draft: ToolDraft, op: dict[str, Any], shared: list[Any], item_pointer: str, pointer: str
    ) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param, at in self._parameters(op, shared, item_pointer, pointer):
            place = param["in"]
            if place not in PARAMETER_PLACES:
                self.log.warn(at, f"{place} parameters are not supported; {param['name']!r} skipped")
                continue
            schema = self._parameter_schema(param, at)
            key = str(param["name"])
            if key in properties:
                key = f"{place}_{key}"
                self.log.warn(
                    at, f"parameter name {param['name']!r} is used twice; this one is argument {key!r}"
                )
            if param.get("description") and isinstance(schema, dict):
                schema = {
                    **schema,
                    "description": schema.get("description") or str(param["description"]).strip(),
                }
            if param.get("deprecated") and isinstance(schema, dict):
                schema["deprecated"] = True
            properties[key] = schema
            if param.get("required") or place == "path":
                required.append(key)
            example = self._parameter_example(param, at)
            if example is not _MISSING:
                draft.parameter_examples[key] = example
        closed = True
        body = self._request_body(op, pointer)
        if body is not None:
            body_schema, body_required, body_examples = body
            draft.body_examples = body_examples
            flat = _flattenable(body_schema)
            if flat is not None and not set(flat[0]) & set(properties):
                body_properties, body_required_names, additional = flat
                properties.update(body_properties)
                if body_required:
                    required += [n for n in body_required_names if n not in required]
                closed = additional is False
            else:
                draft.body_property = unique_name(BODY_PROPERTY, set(properties))
                properties[draft.body_property] = body_schema
                if body_required:
                    required.append(draft.body_property)
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        if closed:
            schema["additionalProperties"] = False
        if not properties:
            schema.pop("properties")
        return schema

    def _parameter_schema(self, param: dict[str, Any], at: str) -> Any:
        if "schema" in param:
            return self.document.schema(param["schema"], child_pointer(at, "schema"), "request")
        media = pick_media(param.get("content"))
        if media is not None and "schema" in media[1]:
            where = child_pointer(at, "content", media[0], "schema")
            return self.document.schema(media[1]["schema"], where, "request")
        self.log.warn(at, f"parameter {param['name']!r} has no schema; taken as a string")
        return {"type": "string"}

    def _parameter_example(self, param: dict[str, Any], at: str) -> Any:
        if "example" in param:
            return param["example"]
        values = self._example_map(param.get("examples"), child_pointer(at, "examples"))
        if values:
            return next(iter(values.values()))
        schema = param.get("schema")
        if isinstance(schema, dict) and str(schema.get("$ref", "")).startswith("#"):
            schema, _ = self.document.deref(
                schema, at
            )  # external refs were already reported by the converter
        if isinstance(schema, dict) and "example" in schema:
            return schema["example"]
        return _MISSING

    def _request_body(self, op: dict[str, Any], pointer: str) -> tuple[Any, bool, dict[str, Any]] | None:
        raw = op.get("requestBody")
        if raw is None:
            return None
        body, at = self.document.deref(raw, child_pointer(pointer, "requestBody"))
        if not isinstance(body, dict):
            return None
        media = pick_media(body.get("content"))
        if media is None:
            self.log.warn(at, "request body without content; ignored")
            return None
        media_type, entry = media
        where = child_pointer(at, "content", media_type)
        base = media_type.split(";")[0].strip().lower()
        if is_json_media(base) or base in FORM_TYPES:
            schema = self.document.schema(entry.get("schema", {}), child_pointer(where, "schema"), "request")
        else:
            self.log.warn(where, f"request body type {media_type!r} is not JSON or a form; taken as a string")
            schema = {"type": "string", "description": f"The request body ({media_type})."}
        return schema, bool(body.get("required")), self._media_examples(entry, where)

    # --- outputs --------------------------------------------------------------------------------------------

    def _responses(self, op: dict[str, Any], pointer: str) -> list[tuple[str, dict[str, Any], str]]:
        out = []
        for code, raw in (op.get("responses") or {}).items():
            response, at = self.document.deref(raw, child_pointer(pointer, "responses", str(code)))
            if isinstance(response, dict):
                out.append((str(code).upper(), response, at))
        return out

    def _success(self, draft: ToolDraft, op: dict[str, Any], pointer: str) -> None:
        candidates = [r for r in self._responses(op, pointer) if r[0].startswith("2")]
        candidates.sort(key=lambda r: (not r[0].isdigit(), r[0]))  # 200 before 201 before 2XX
        if not candidates:
            return
        code, response, at = candidates[0]
        media = pick_media(response.get("content"))
        if media is None:
            return  # e.g. 204: a text tool; the world model phrases the acknowledgement
        media_type, entry = media
        where = child_pointer(at, "content", media_type)
        results = self._media_examples(entry, where)
        if is_json_media(media_type) and "schema" in entry:
            schema = self.document.schema(entry["schema"], child_pointer(where, "schema"), "response")
            output, wrapper = fit_output_schema(schema)
            draft.tool["outputSchema"] = output
            draft.tool["outputWrapper"] = wrapper
            if not results and isinstance(schema, dict) and schema.get("examples"):
                results = {"schema example": schema["examples"][0]}
        elif not is_json_media(media_type):
            results = {k: v if isinstance(v, str) else str(v) for k, v in results.items()}
        draft.tool["examples"] = self._pair_examples(draft, results)

    def _pair_examples(self, draft: ToolDraft, results: dict[str, Any]) -> list[dict[str, Any]]:
        """One example per response example; its arguments are the parameter examples plus the request-body
        example of the same name (else the first one). `fit_tool` drops those that do not validate."""
        examples = []
        default_body = next(iter(draft.body_examples.values()), _MISSING)
        for name, result in results.items():
            arguments = copy.deepcopy(draft.parameter_examples)
            body = draft.body_examples.get(name, default_body)
            if body is not _MISSING:
                if draft.body_property is not None:
                    arguments[draft.body_property] = copy.deepcopy(body)
                elif isinstance(body, dict):
                    arguments.update(copy.deepcopy(body))
            examples.append({"arguments": arguments, "result": copy.deepcopy(result)})
        return examples

    def _media_examples(self, entry: dict[str, Any], pointer: str) -> dict[str, Any]:
        if "example" in entry:
            return {"example": entry["example"]}
        return self._example_map(entry.get("examples"), child_pointer(pointer, "examples"))

    def _example_map(self, raw: Any, pointer: str) -> dict[str, Any]:
        if not isinstance(raw, dict):
            return {}
        values = {}
        for name, example in raw.items():
            example, at = self.document.deref(example, child_pointer(pointer, name))
            if isinstance(example, dict) and "value" in example:
                values[str(name)] = example["value"]
            elif isinstance(example, dict) and "externalValue" in example:
                self.log.warn(at, "externalValue examples are not fetched; skipped")
        return values

    def _errors(self, op: dict[str, Any], pointer: str) -> list[dict[str, Any]]:
        errors = []
        taken: set[str] = set()
        for code, response, _at in self._responses(op, pointer):
            if code[:1] not in ("4", "5"):
                continue
            status = int(code) if code.isdigit() else None
            phrase = _phrase(status) if status else f"{code} error"
            described = str(response.get("description") or "").strip()
            base = slug(described, "") if described and len(described) <= 60 else ""
            name = unique_name(base or (f"http_{code.lower()}" if status else f"{code[0]}xx_error"), taken)
            message = _example_message(response) or described or phrase
            error: dict[str, Any] = {"name": name, "message": message}
            if status:
                error["status"] = status
            if described and described != message:
                error["when"] = described
            errors.append(error)
        return errors


_MISSING = object()


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _example_message(response: dict[str, Any]) -> str | None:
    """The `message`/`error`/`detail` text of the response's JSON example, if it has one."""
    media = pick_media(response.get("content"))
    if media is None:
        return None
    entry = media[1]
    values = [entry.get("example")] + [
        e.get("value") for e in (entry.get("examples") or {}).values() if isinstance(e, dict)
    ]
    for value in values:
        if isinstance(value, dict):
            for key in ("message", "error", "detail", "title"):
                if isinstance(value.get(key), str):
                    return value[key]
    return None


def _flattenable(schema: Any) -> tuple[dict[str, Any], list[str], Any] | None:
    """(properties, required, additionalProperties) of a body whose properties can be top-level arguments:
    a plain object schema, or an `allOf` of plain object schemas (the usual "Base + extra fields" pattern)."""
    if not isinstance(schema, dict):
        return None
    plain = {"type", "properties", "required", "description", "title", "additionalProperties", "examples"}
    parts = schema.get("allOf") if set(schema) <= {"allOf", "description", "title", "type"} else [schema]
    if not isinstance(parts, list) or not parts:
        return None
    properties: dict[str, Any] = {}
    required: list[str] = []
    additional: Any = None
    for part in parts:
        if not (isinstance(part, dict) and set(part) <= plain and part.get("type", "object") == "object"):
            return None
        if "properties" not in part:
            return None
        properties.update(part["properties"])
        required += [n for n in part.get("required", []) if n not in required]
        additional = part.get("additionalProperties", additional) if len(parts) == 1 else None
    return properties, required, additional


def annotations_for(method: str) -> dict[str, bool]:
    """What HTTP method semantics promise: safe methods only read, DELETE destroys, PUT and DELETE are
    idempotent."""
    if method in ("get", "head", "options", "trace"):
        return {"readOnlyHint": True}
    hints = {"readOnlyHint": False}
    if method == "delete":
        hints.update(destructiveHint=True, idempotentHint=True)
    if method == "put":
        hints["idempotentHint"] = True
    return hints


def import_openapi(
    path: str | Path, log: ImportLog, only: OperationFilter | None = None
) -> tuple[dict[str, Any], str]:
    """The world (a plain dict, ready for `finish_world`) described by the OpenAPI document at `path`, limited to
    the operations `only` keeps, and how to import fewer of them (`finish_world`'s `subset`)."""
    importer = OpenAPIImporter(read_document(path), log, only)
    return importer.world(), importer.subset_hint()
