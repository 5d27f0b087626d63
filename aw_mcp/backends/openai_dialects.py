"""How each kind of OpenAI-compatible server takes a constraint (its dialect), how a server is recognised from its
`GET /v1/models` and `GET /version` answers, and the forms a constraint is sent in, best first (grammar, JSON Schema,
none). What the client does with them (probing once, learning refusals) is `openai.py`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# An error body that names one of these blames the constraint (vLLM, SGLang, llama.cpp, TGI and OpenAI wordings).
CONSTRAINT_WORDS = re.compile(
    r"response_format|json_schema|json_object|guided|structured|grammar|ebnf|xgrammar|outlines", re.I
)
# The request fields that carry a constraint, in every dialect below.
CONSTRAINT_FIELDS = frozenset({"response_format", "structured_outputs", "guided_grammar", "ebnf", "grammar"})
# How a constraint is sent, best first (Generation.extra["constrained_as"] says which one an answer had).
GRAMMAR, JSON_SCHEMA, UNCONSTRAINED = "grammar", "json_schema", "none"


def schema_name(tool: str) -> str:
    """A `json_schema.name` servers accept (OpenAI: 1-64 of A-Z a-z 0-9 _ -)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", tool)[:64] or "observation"


@dataclass(frozen=True)
class Dialect:
    """How one kind of server takes a constraint."""

    name: str  # for messages
    grammar_field: tuple[str, ...] = ()  # where the grammar text goes in the request body; () = nowhere
    json_object: bool = False  # the schema as response_format {"type": "json_object", "schema": ...}
    # The JSON Schema alone (response_format) after a refused grammar: valid JSON, but the answer loses the trained
    # frame. Only for a server known to take a grammar; an unknown one is not constrained at all (issue 31.6).
    schema_alone: bool = True


# A server not identified: nothing it can constrain keeps the frame (`**Environment Observation:**` then the
# answer), so its answers are decoded free and validated afterwards.
GENERIC = Dialect("an OpenAI-compatible server", schema_alone=False)
DIALECTS = {
    "openai": GENERIC,
    "vllm": Dialect("vLLM", ("structured_outputs", "grammar")),
    "vllm-guided": Dialect("vLLM before 0.10.2", ("guided_grammar",)),
    "sglang": Dialect("SGLang", ("ebnf",)),
    "llama.cpp": Dialect("llama.cpp's llama-server", ("grammar",)),
    "llama-cpp-python": Dialect("llama-cpp-python's server", ("grammar",), json_object=True),
}
# vLLM takes the grammar as `structured_outputs.grammar` from 0.10.2 and as `guided_grammar` before (dropped in 0.12,
# and then ignored). Before 0.8 none is sent: those versions could hand a grammar to outlines, which reads Lark.
VLLM_STRUCTURED_OUTPUTS = (0, 10, 2)
VLLM_XGRAMMAR = (0, 8, 0)


def dialect_of(listing: Any, model: str) -> str | None:
    """The dialect `GET /v1/models` reveals (its entry for `model`, or its only owner), or None: unknown."""
    data = listing.get("data") if isinstance(listing, dict) else None
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    mine = [e for e in entries if e.get("id") == model] or entries
    owners = {str(e.get("owned_by")) for e in mine}
    if len(owners) != 1:
        return None
    owner = owners.pop()
    if owner == "me" and all(isinstance(e.get("permissions"), list) for e in mine):
        return "llama-cpp-python"  # its hard-coded listing: {"owned_by": "me", "permissions": []}
    return {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp"}.get(owner)


def vllm_dialect(version: Any) -> str:
    """The vLLM dialect of a `GET /version` answer. An unknown version gets the current field: a vLLM recent
    enough for the world model's architecture (Qwen3.5) takes it."""
    text = version.get("version") if isinstance(version, dict) else None
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", text) if isinstance(text, str) else None
    if found is None:
        return "vllm"
    release = tuple(int(part) for part in found.groups())
    if release < VLLM_XGRAMMAR:
        return "openai"
    return "vllm-guided" if release < VLLM_STRUCTURED_OUTPUTS else "vllm"


# What happens once a server refused a form of constraint: for every structured tool, or for one.
SERVER_FALLBACKS = {
    GRAMMAR: "structured tools get their output schema alone instead (the answer loses the trained frame)",
    JSON_SCHEMA: "falling back to validate-and-retry for every structured tool",
}
TOOL_FALLBACKS = {
    GRAMMAR: "sending that tool its output schema alone instead (the answer loses the trained frame)",
    JSON_SCHEMA: "decoding that tool unconstrained, validated afterwards",
}


def form_field(form: str, dialect: Dialect) -> str:
    return ".".join(dialect.grammar_field) if form == GRAMMAR else "response_format"


def at_path(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """`{"a": {"b": value}}` for the path ("a", "b")."""
    for key in reversed(path):
        value = {key: value}
    return value
