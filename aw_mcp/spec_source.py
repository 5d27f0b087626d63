"""Reading YAML while remembering where every value came from, so spec errors can say `file:line`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Location = tuple[int, int]  # 1-based line, 1-based column
PathKey = tuple[str | int, ...]


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
    """The file is not YAML at all (or not readable)."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


def _walk(node: yaml.Node, here: PathKey, out: dict[PathKey, Location]) -> None:
    out.setdefault(here, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            child = (*here, key)
            # Point at the key: that is the line a user looks for.
            out[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _walk(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*here, index), out)


def parse_yaml(text: str, path: str = "<string>") -> SpecSource:
    """Parse with `yaml.safe_load` semantics and record positions from the composed node tree."""
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise SpecSyntaxError(path, line, f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise SpecSyntaxError(path, 1, f"invalid YAML: {exc}") from None
    positions: dict[PathKey, Location] = {}
    if node is not None:
        _walk(node, (), positions)
    return SpecSource(path=path, data=data, positions=positions)


def read_yaml(path: str | Path) -> SpecSource:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecSyntaxError(str(path), 1, f"cannot read file: {exc.strerror or exc}") from None
    return parse_yaml(text, str(path))
