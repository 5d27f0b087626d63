"""Reading YAML while remembering where every value came from, so spec errors can say `file:line`.

World files come from other people, so the loader is bounded: a file over MAX_FILE_BYTES (refused before it is
parsed), more than MAX_EXPANDED_NODES values (counted while parsing, so a huge file stops early), a duplicate key,
nesting deeper than MAX_DEPTH, a document whose aliases expand past MAX_EXPANDED_NODES values (a "billion laughs")
or MAX_EXPANDED_CHARS characters of text (a few big texts named many times), a recursive alias, a `!!binary`
value, an explicit tag whose value it cannot read (`!!int abc`, `!!bool maybe`, `!!set [a]`), a text holding a
lone UTF-16 surrogate (`"\\uD800"`: no character, and no UTF-8 encoder takes it) or one longer than
MAX_SCALAR_CHARS is a `file:line` error rather than a silent surprise, a hang, a traceback or a world that loads
and then fails every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Location = tuple[int, int]  # 1-based line, 1-based column
PathKey = tuple[str | int, ...]

MAX_DEPTH = 64  # nested mappings/sequences; the bundled worlds use at most 13
MAX_EXPANDED_NODES = 200_000  # nodes after expanding every alias; the bundled worlds have under 1,500
# Text after expanding every alias (what the world model is sent, and what a session renders): 4M characters is
# ~1.3M tokens, 10x the default context, and PyYAML renders it in about a second. Without it a 100 KB file rendered
# to 20 MB (`validate` 32 s) and a 1 MB one asked for 5 GB.
MAX_EXPANDED_CHARS = 4_000_000
# The file itself, checked before parsing (PyYAML reads ~1 MB/s): the bundled worlds are under 50 KB.
MAX_FILE_BYTES = 8 * 1024 * 1024
# One text (a value or a key): 1M characters is ~330K tokens, past the default 131,072-token context on its own.
# The bundled worlds' longest is under 4,000.
MAX_SCALAR_CHARS = 1_000_000


@dataclass
class SpecSource:
    """A parsed YAML document plus the position of each mapping key / sequence item in it."""

    path: str
    data: Any
    positions: dict[PathKey, Location]

    def locate(self, loc: PathKey) -> Location:
        """Position of the deepest existing prefix of `loc` (pydantic error paths may point below a value)."""
        for end in range(len(loc), -1, -1):
            found = self.positions.get(tuple(loc[:end]))
            if found is not None:
                return found
        return (1, 1)


class SpecSyntaxError(ValueError):
    """The file is not YAML at all (or not readable), or it breaks one of the loader's bounds."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


class _Bound(yaml.MarkedYAMLError):
    """A bound of the loader was passed at `problem_mark`."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, deep nesting and `!!binary`, counting depth while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Bound(problem=f"nesting deeper than {MAX_DEPTH} levels", problem_mark=mark)
            if self._nodes > MAX_EXPANDED_NODES:  # stop early: the rest of a huge file is not parsed
                mark = self.peek_event().start_mark
                raise _Bound(
                    problem=f"the file holds more than {MAX_EXPANDED_NODES:,} values (mappings, lists, texts); a "
                    "world file this large is refused",
                    problem_mark=mark,
                )
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Every node is built at once (`deep`), so a value its tag cannot read (`!!int abc` -> ValueError,
        `!!bool maybe` -> KeyError, `!!set [a]` -> TypeError) fails here, where its line is known."""
        try:
            return super().construct_object(node, deep=True)
        except (yaml.MarkedYAMLError, RecursionError):
            raise
        except Exception as exc:
            raise _Bound(problem=_unreadable(node, exc), problem_mark=node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):  # `!!map x`, `!!set [a]`
            raise _Bound(problem=_unreadable(node, None), problem_mark=node.start_mark)
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise _Bound(
                    problem="a mapping key must be a plain value, not a list or mapping",
                    problem_mark=key_node.start_mark,
                ) from None
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise _Bound(
                    problem=f"duplicate key {key!r} (first defined on line {first}); a later key would silently "
                    "replace the earlier one",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]

    def construct_yaml_binary(self, node: yaml.Node) -> Any:
        raise _Bound(
            problem="`!!binary` values are not supported in world files (use plain text)",
            problem_mark=node.start_mark,
        )

    def construct_yaml_timestamp(self, node: yaml.Node) -> Any:
        try:
            return super().construct_yaml_timestamp(node)  # type: ignore[arg-type]
        except (ValueError, OverflowError) as exc:  # 2026-13-45: looks like a date, is not one
            raise _Bound(
                problem=f"{node.value!r} is not a valid date or time ({exc})", problem_mark=node.start_mark
            ) from None


def _unreadable(node: yaml.Node, exc: Exception | None) -> str:
    """`!!int abc`: what the tag could not read, in the file's own spelling."""
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    if isinstance(node, yaml.ScalarNode):
        shown = node.value if len(node.value) <= 60 else node.value[:60] + "…"
        what = f"{tag} {shown!r}" if shown else f"an empty {tag}"
    else:
        what = f"{tag} on a {'mapping' if isinstance(node, yaml.MappingNode) else 'sequence'}"
    detail = f" ({type(exc).__name__}: {str(exc)[:120]})" if exc is not None and str(exc) else ""
    return f"{what}: the tag cannot read this value{detail}; drop the tag or fix the value"


def _scalar_problem(node: yaml.ScalarNode) -> str | None:
    """Why one text cannot be in a world file: past MAX_SCALAR_CHARS, or a lone surrogate (YAML's `"\\uD800"`
    escape: half of a UTF-16 pair, no character; JSON, UTF-8 and the world model cannot carry it)."""
    text = node.value
    if len(text) > MAX_SCALAR_CHARS:
        return f"a text of {len(text):,} characters; a world file value holds at most {MAX_SCALAR_CHARS:,}"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        after = ord(text[exc.start + 1]) if exc.start + 1 < len(text) else 0
        if 0xD800 <= code < 0xDC00 and 0xDC00 <= after < 0xE000:  # a JSON-style pair: name the character
            joined = 0x10000 + ((code - 0xD800) << 10) + (after - 0xDC00)
            fix = f"write the character itself or the escape \\U{joined:08X}"
        else:
            fix = "write the character itself or its \\U escape"
        return (
            f"the text holds U+{code:04X}, half of a UTF-16 surrogate pair and not a character (a `\\u{code:04X}` "
            f"escape?); {fix}"
        )
    return None


BoundedLoader.add_constructor("tag:yaml.org,2002:binary", BoundedLoader.construct_yaml_binary)
BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", BoundedLoader.construct_yaml_timestamp)


def _expanded_size(root: yaml.Node) -> None:
    """Count the values and the characters of text the document has once every alias is expanded, without
    expanding it (an alias is the same node object, so each node's size is computed once). Raises _Bound past a
    limit (naming aliases only when they are the cause), on a recursive alias or on a text that cannot be in a
    world file (`_scalar_problem`)."""
    sizes: dict[int, tuple[int, int, bool]] = {}  # node -> (values, characters, reached an alias)
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    shared: set[int] = set()  # nodes met more than once: anchors used by an alias
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            if isinstance(node, yaml.MappingNode):
                parts = [sizes[id(n)] for pair in node.value for n in pair]
                members = [id(n) for pair in node.value for n in pair]
            elif isinstance(node, yaml.SequenceNode):
                parts = [sizes[id(n)] for n in node.value]
                members = [id(n) for n in node.value]
            else:
                parts, members = [], []
            values = 1 + sum(p[0] for p in parts)
            chars = (len(node.value) if isinstance(node, yaml.ScalarNode) else 0) + sum(p[1] for p in parts)
            aliased = any(p[2] for p in parts) or any(m in shared for m in members)
            if values > MAX_EXPANDED_NODES or chars > MAX_EXPANDED_CHARS:
                raise _Bound(problem=_too_big(values, chars, aliased), problem_mark=node.start_mark)
            sizes[key] = (values, chars, aliased)
            continue
        if key in sizes:
            shared.add(key)
            continue
        if key in on_path:
            raise _Bound(
                problem="a recursive alias (an anchor used inside itself)", problem_mark=node.start_mark
            )
        on_path.add(key)
        if isinstance(node, yaml.ScalarNode) and (problem := _scalar_problem(node)) is not None:
            raise _Bound(problem=problem, problem_mark=node.start_mark)
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend(((v, False), (k, False)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, False) for v in node.value)


def _too_big(values: int, chars: int, aliased: bool) -> str:
    """What limit a value passes, and through what: its aliases (`*name`), or its own size."""
    if values > MAX_EXPANDED_NODES:
        size = f"more than {MAX_EXPANDED_NODES:,} values"
    else:
        size = f"more than {MAX_EXPANDED_CHARS:,} characters of text"
    if aliased:
        return (
            f"this value expands to {size} through its aliases (`*name` references, each a full copy of its "
            "anchor); a world file this large is refused"
        )
    return f"this value holds {size}; a world file this large is refused"


def _walk(root: yaml.Node, out: dict[PathKey, Location]) -> None:
    """Positions of every key and item, visiting an aliased node once (its copies fall back to their parent)."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, PathKey]] = [(root, ())]
    while stack:
        node, here = stack.pop()
        out.setdefault(here, (node.start_mark.line + 1, node.start_mark.column + 1))
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
                child = (*here, key)
                # Point at the key: that is the line a user looks for.
                out[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                stack.append((value_node, child))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((item, (*here, index)))


def _file_too_big(size: int) -> str:
    return (
        f"the file is {size:,} bytes; a world file holds at most {MAX_FILE_BYTES:,} (the bundled ones are under "
        "50 KB): it is refused before parsing"
    )


def parse_yaml(text: str, path: str = "<string>") -> SpecSource:
    """Parse with `yaml.safe_load` semantics (within the bounds above) and record positions from the node tree."""
    if len(text) > MAX_FILE_BYTES // 4 and len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise SpecSyntaxError(path, 1, _file_too_big(len(text.encode("utf-8", "surrogatepass"))))
    node: yaml.Node | None = None
    loader: BoundedLoader | None = None
    try:
        loader = BoundedLoader(text)
        node = loader.get_single_node()
        if node is not None:
            _expanded_size(node)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        prefix = "" if isinstance(exc, _Bound) else "invalid YAML: "
        raise SpecSyntaxError(path, line, f"{prefix}{exc.problem or exc}") from None
    except yaml.reader.ReaderError as exc:  # a control character: the reader reports an offset, not a mark
        line = text[: exc.position].count("\n") + 1
        raise SpecSyntaxError(
            path, line, f"invalid YAML: character #x{exc.character:04x} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        raise SpecSyntaxError(path, 1, f"invalid YAML: {exc}") from None
    except RecursionError:  # a bound above should come first; never let it become a traceback
        raise SpecSyntaxError(path, 1, f"nesting deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    positions: dict[PathKey, Location] = {}
    if node is not None:
        _walk(node, positions)
    return SpecSource(path=path, data=data, positions=positions)


def read_yaml(path: str | Path) -> SpecSource:
    try:
        # No more than the limit is read (a FIFO or /dev/zero has no size).
        with Path(path).open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
            size = max(len(raw), Path(path).stat().st_size)
    except OSError as exc:
        raise SpecSyntaxError(str(path), 1, f"cannot read file: {exc.strerror or exc}") from None
    if size > MAX_FILE_BYTES:
        raise SpecSyntaxError(str(path), 1, _file_too_big(size))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecSyntaxError(
            str(path), line, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    return parse_yaml(text, str(path))
