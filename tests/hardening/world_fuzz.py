"""A seeded mutator of world files: each case is a bundled world (or the test suite's small world) with one to
three hostile edits, as a user's copy-paste slip or a shared world file could make them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import REPO, SMALL_WORLD

Mutation = Callable[[random.Random, str], str]

SEEDS = [SMALL_WORLD] + [p.read_text() for p in sorted((REPO / "worlds").glob("*.yaml"))]

JUNK_VALUES = [
    "null",
    "~",
    "[]",
    "{}",
    "[mcp]",
    "{a: 1}",
    "-1",
    "0",
    "1e20",
    ".inf",
    ".nan",
    "'7'",
    "true",
    "!!binary aGk=",
    "'\\u0000'",
    '"x\\n"',
    "&a [1]",
    "*nope",
    "[*a]",
    "99999999999999999999999",
    "'#'",
    "2026-13-45",
    "{$ref: '#'}",
    "{$ref: 'urn:x'}",
    "{$ref: 'file:///etc/passwd'}",
    "{$ref: '#/$defs/x'}",
    "|\n  text",
]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def replace_value(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    candidates = [i for i, line in enumerate(lines) if ": " in line]
    if not candidates:
        return text
    i = rng.choice(candidates)
    key, _, _ = lines[i].partition(": ")
    lines[i] = f"{key}: {rng.choice(JUNK_VALUES)}"
    return "\n".join(lines)


def duplicate_line(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])
    return "\n".join(lines)


def delete_lines(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    del lines[i : i + rng.randint(1, 4)]
    return "\n".join(lines)


def truncate(rng: random.Random, text: str) -> str:
    return text[: rng.randrange(len(text) + 1)]


def flip_bytes(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 5)):
        chars[rng.randrange(len(chars))] = rng.choice(
            ["{", "[", ":", "-", "*", "&", "\t", "\x00", "\udcff", "'", '"']
        )
    return "".join(chars)


def deep_nesting(rng: random.Random, text: str) -> str:
    depth = rng.choice([50, 70, 200, 400])
    where = rng.choice(["state", "x-deep", "tools[0].inputSchema"])
    body = "{a: " * depth + "1" + "}" * depth
    if where == "tools[0].inputSchema":
        nested = "{type: object, properties: {a: " * (depth // 2) + "{type: string}" + "}}" * (depth // 2)
        return text.replace("inputSchema:", f"inputSchema: {nested}\n    x-old:", 1)
    return text + f"\n{where}: {body}\n"


def billion_laughs(rng: random.Random, text: str) -> str:
    levels = rng.randint(3, 9)
    out = "\nx-laughs:\n  l0: &l0 [lol, lol, lol, lol, lol]\n"
    for n in range(1, levels + 1):
        out += f"  l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 5) + "]\n"
    return text.replace("\nstate:", "\nstate_:", 1) + out + f"state: *l{levels}\n"


def recursive_ref(rng: random.Random, text: str) -> str:
    ref = rng.choice(["'#'", "'#/$defs/a'", "'urn:x'", "'file:///etc/passwd'", "'other.yaml'", "'#anchor'"])
    schema = (
        "{type: object, $defs: {a: {$ref: '#/$defs/b'}, b: {allOf: [{$ref: '#/$defs/a'}]}}, "
        f"properties: {{p: {{$ref: {ref}}}}}}}"
    )
    return text.replace("inputSchema:", f"inputSchema: {schema}\n    x-old:", 1)


def odd_scalars(rng: random.Random, text: str) -> str:
    extra = rng.choice(
        [
            "\nseed: '7'\n",
            "\nseed: true\n",
            "\nmodel: {max_tokens: 1e20}\n",
            "\nmodel: {timeout_s: .inf}\n",
            "\nmodel: {base_url: not a url}\n",
            "\ndomain: [mcp]\n",
            "\nname: !!binary aGk=\n",
            "\ntools: []\n",
            "\nmodel: {context_tokens: 10}\n",
        ]
    )
    return text + extra


def tool_name_newline(rng: random.Random, text: str) -> str:
    return text.replace("- name: ", '- name: "x\\n', 1).replace('"x\\n', '"get_z\\n"\n    x-was: ', 1)


# Issue 21, item 5: explicit tags whose value the tag cannot read (or can, into a non-JSON value), lone UTF-16
# surrogates and huge texts, anywhere a value or a key can stand.
TAGGED_VALUES = [
    "!!bool maybe",
    "!!bool yes",
    "!!int abc",
    "!!int 0x1F",
    "!!int " + "9" * 5000,
    "!!float abc",
    "!!float 1e999",
    "!!float .nan",
    "!!timestamp garbage",
    "!!timestamp 2026-02-30",
    "!!timestamp 2026-01-01",
    "!!set [a]",
    "!!set {a, b}",
    "!!set {}",
    "!!map x",
    "!!map [a]",
    "!!seq x",
    "!!seq {a: 1}",
    "!!omap x",
    "!!omap [{a: 1}, {b: 2}]",
    "!!pairs [{a: 1}]",
    "!!pairs x",
    "!!yaml x",
    "!!null x",
    "!!str",
    "!!merge x",
    "!!value x",
    "!<tag:yaml.org,2002:int> 7",
    "!local x",
    "!!python/object/apply:os.system [echo]",
    "2026-01-01",
    "2026-01-01T09:00:00Z",
    "9" * 5000,
]
SURROGATES = ["\\uD800", "\\uDFFF", "\\uD83D\\uDE00", "\\U0000DC00", "a\\uDBFFb"]


def explicit_tag(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    candidates = [i for i, line in enumerate(lines) if ": " in line]
    if not candidates:
        return text
    i = rng.choice(candidates)
    key, _, value = lines[i].partition(": ")
    tagged = rng.choice(TAGGED_VALUES)
    if rng.random() < 0.25:  # as a key
        indent = key[: len(key) - len(key.lstrip(" -"))]
        lines[i] = f"{indent}{tagged}: {value}"
    else:
        lines[i] = f"{key}: {tagged}"
    return "\n".join(lines)


def lone_surrogate(rng: random.Random, text: str) -> str:
    lines = _lines(text)
    candidates = [i for i, line in enumerate(lines) if ": " in line]
    if not candidates:
        return text
    i = rng.choice(candidates)
    key, _, value = lines[i].partition(": ")
    odd = rng.choice(SURROGATES)
    if rng.random() < 0.25:  # in a key
        indent = key[: len(key) - len(key.lstrip(" -"))]
        lines[i] = f'{indent}"{key.lstrip(" -")}{odd}": {value}'
    else:
        lines[i] = f'{key}: "{value.strip(chr(34))[:40]}{odd}"'
    return "\n".join(lines)


def huge_scalar(rng: random.Random, text: str) -> str:
    """A text just past the loader's cap (a bigger one only takes longer to read), or a big one under it."""
    from aw_mcp.spec.source import MAX_SCALAR_CHARS

    size = rng.choice([MAX_SCALAR_CHARS + 1, MAX_SCALAR_CHARS + 10_000, 200, 5_000, 60_000, 250_000, 400_000])
    lines = _lines(text)
    candidates = [i for i, line in enumerate(lines) if ": " in line]
    if not candidates:
        return text
    i = rng.choice(candidates)
    key, _, _ = lines[i].partition(": ")
    filler = rng.choice(["n", "ab ", "é"]) * size
    style = rng.choice(["plain", "quoted", "block"])
    if style == "block":
        indent = " " * (len(key) - len(key.lstrip(" -")) + 2)
        lines[i] = f"{key}: |\n{indent}{filler[:size]}"
    elif style == "quoted":
        lines[i] = f'{key}: "{filler[:size]}"'
    else:
        lines[i] = f"{key}: {filler[:size].strip() or 'n'}"
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Issue 34: what stalled the event loop or validated and then failed to serve
# ---------------------------------------------------------------------------------------------------------------


def _with_schema(text: str, schema: str, extra: str = "") -> str:
    """The first tool's inputSchema replaced (its old one kept under an `x-` key)."""
    if "inputSchema:" not in text:
        return text
    return text.replace("inputSchema:", f"inputSchema: {schema}\n{extra}    x-old:", 1)


def ref_fan_out(rng: random.Random, text: str) -> str:
    """`allOf`/`anyOf`/`oneOf` branches that point twice at the next `$defs` entry: 2^levels paths."""
    levels = rng.choice([3, 12, 18, 40])
    keyword = rng.choice(["anyOf", "allOf", "oneOf"])
    defs = ", ".join(
        f"d{i}: {{{keyword}: [{{$ref: '#/$defs/d{i + 1}'}}, {{$ref: '#/$defs/d{i + 1}'}}]}}"
        for i in range(levels)
    )
    schema = f"{{type: object, $defs: {{{defs}, d{levels}: {{type: string}}}}, properties: {{p: {{$ref: '#/$defs/d0'}}}}}}"
    example = rng.choice(
        [
            "",
            "    examples: [{arguments: {p: x}, result: x}]\n",
            "    examples: [{arguments: {p: 1}, result: x}]\n",
        ]
    )
    return _with_schema(text, schema, example)


def non_schema_ref(rng: random.Random, text: str) -> str:
    """A `$ref` that resolves to something that is not a schema (a list, a string, a number)."""
    target = rng.choice(
        [
            "'#/properties/a/enum'",
            "'#/properties/a/enum/0'",
            "'#/properties/a/type'",
            "'#/required'",
            "'#/$defs/l'",
        ]
    )
    schema = f"{{type: object, $defs: {{l: [1, 2]}}, required: [a], properties: {{a: {{type: string, enum: [x, y]}}, b: {{$ref: {target}}}}}}}"
    return _with_schema(text, schema)


def costly_keywords(rng: random.Random, text: str) -> str:
    """Keywords whose checks were quadratic, unbounded or overflowing: uniqueItems, format: regex, multipleOf."""
    keyword = rng.choice(
        [
            "{type: array, uniqueItems: true}",
            "{type: string, format: regex}",
            "{multipleOf: 0.75}",
            "{multipleOf: 1.0e-300}",
            "{multipleOf: 1.0e+400}",
            "{type: number, multipleOf: .inf}",
            "{format: regex, pattern: '^(a+)+$'}",
        ]
    )
    example = rng.choice(
        [
            "",
            "    examples: [{arguments: {a: [1, 1.0]}, result: x}]\n",
            "    examples: [{arguments: {a: .nan}, result: x}]\n",
        ]
    )
    return _with_schema(text, f"{{type: object, properties: {{a: {keyword}}}}}", example)


def big_aliases(rng: random.Random, text: str) -> str:
    """A big text named many times: small on disk, megabytes (or gigabytes) once expanded."""
    size = rng.choice([10_000, 100_000, 400_000])
    uses = rng.choice([5, 40, 90, 300])
    names = "".join(f"  k{i}: *big\n" for i in range(uses))
    return text.replace("\nstate:", "\nstate_:", 1) + f"\nx-big: &big {'w' * size}\nstate:\n{names}"


def latency_values(rng: random.Random, text: str) -> str:
    """Waits a fault cannot take: infinite, NaN, past an hour, a lognormal whose tail overflows."""
    fault = rng.choice(
        [
            "{kind: latency, fixed_ms: .inf}",
            "{kind: latency, fixed_ms: .nan}",
            "{kind: latency, fixed_ms: 1.0e+400}",
            "{kind: latency, fixed_ms: 3600001}",
            "{kind: latency, fixed_ms: 5}",
            "{kind: latency, median_ms: 5, sigma: 10}",
            "{kind: latency, median_ms: 5, sigma: 1.0e+28}",
            "{kind: latency, median_ms: 1, sigma: 4}",
            "{kind: latency, mean_ms: 1, stddev_ms: .inf}",
            "{kind: hang, seconds: .inf}",
            "{kind: hang, seconds: 1.0e+9}",
            "{kind: error, timeout_s: .inf}",
        ]
    )
    schedule = rng.choice(
        ["", ", schedule: {mode: degrade, step: 1.0e+300}", ", schedule: {mode: degrade, step: .inf}"]
    )
    block = f"\nperturbations:\n  - {{name: slow, match: {{tool: '*'}}, fault: {fault}{schedule}}}\n"
    return text.replace("\nperturbations:", "\nx-perturbations:", 1) + block


PROMPT_FOLDERS = [
    "prompts_ok",
    "prompts_bad_slot",
    "prompts_missing",
    "prompts_big",
    "/dev/null",
    "no_such_dir",
]


def prompts_folder(rng: random.Random, text: str) -> str:
    """A `prompts:` folder `serve` would refuse (or take): made by `write_case` beside the case."""
    return text.replace("\nprompts:", "\nx-prompts:", 1) + f"\nprompts: {rng.choice(PROMPT_FOLDERS)}\n"


def _prompt_folders(folder: Path) -> None:
    """The folders `prompts_folder` names, once per fuzz folder: every domain's templates, or broken ones."""
    if (folder / "prompts_ok").is_dir():
        return
    from aw_mcp.spec.bundled import prompts_dir

    bundled = prompts_dir()
    for name in ("prompts_ok", "prompts_bad_slot", "prompts_big", "prompts_missing"):
        for domain in sorted(p.name for p in bundled.iterdir() if p.is_dir()):
            target = folder / name / domain
            target.mkdir(parents=True, exist_ok=True)
            if name == "prompts_missing":
                continue
            for template in (bundled / domain).glob("*.txt"):
                body = template.read_text()
                if name == "prompts_bad_slot":
                    body += "\n{no_such_slot}\n"
                elif name == "prompts_big" and template.stem == "system_prompt":
                    body += "\n{world_name} {facts} {initial_state}" + " filler {now}\n" * 80_000  # ~1.2 MB
                (target / template.name).write_text(body)


MUTATIONS: list[Mutation] = [
    replace_value,
    replace_value,
    duplicate_line,
    delete_lines,
    truncate,
    flip_bytes,
    deep_nesting,
    billion_laughs,
    recursive_ref,
    odd_scalars,
    tool_name_newline,
    explicit_tag,
    explicit_tag,
    lone_surrogate,
    huge_scalar,
    ref_fan_out,
    non_schema_ref,
    costly_keywords,
    big_aliases,
    latency_values,
    prompts_folder,
]


def case(rng: random.Random) -> bytes:
    text = rng.choice(SEEDS)
    for _ in range(rng.randint(1, 3)):
        text = rng.choice(MUTATIONS)(rng, text)
    data = text.encode("utf-8", errors="surrogateescape")
    if rng.random() < 0.03:  # a stray non-UTF-8 byte
        at = rng.randrange(len(data) + 1)
        data = data[:at] + b"\xff" + data[at:]
    return data


def write_case(rng: random.Random, folder: Path, n: int) -> Path:
    _prompt_folders(folder)
    path = folder / f"case{n:05d}.yaml"
    path.write_bytes(case(rng))
    return path


def hostile_arguments(rng: random.Random, schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a tool that hit the checks issue 34 bounded: non-finite and huge numbers, 4,000 distinct
    objects, a 400 KB alternation, a regex that overflowed Python's parser, deep nesting, a megabyte of text."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    names = list(properties) or ["a"]
    values: list[Any] = [
        float("nan"),
        float("inf"),
        -float("inf"),
        10**400,
        [{"i": i} for i in range(4000)],
        [{"i": i} for i in range(4000)] + [{"i": 7}],
        "|".join(f"w{i}" for i in range(60_000)),
        "a{4294967296}",
        "(a)\\1",
        {"a": [{"b": [{"c": [1]}]}]},
        "x" * 1_000_000,
        None,
        {"$ref": "#"},
    ]
    out = {}
    for name in rng.sample(names, min(len(names), rng.randint(1, 3))):
        out[name] = rng.choice(values)
    return out
