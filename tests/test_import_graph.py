"""No import cycle in aw_mcp/ or engine/, and no function-level import that only exists to dodge one.

Every module of the two packages is parsed with `ast` (nothing is imported). An edge A -> B is an import that runs
when A is imported: a statement at module level, or in a class body or an `if`/`try`/`with` block there, but not
inside a function and not under `if TYPE_CHECKING:` (annotations only). `import a.b` and `from a import b` (b a
submodule) point at `a.b`; `from a import name` (name not a submodule) points at `a`, i.e. `a/__init__.py`. A
submodule import also runs its package's `__init__`, which Python handles while the package is half initialised, so
that implicit edge is not counted (as import-linter and pydeps do not count it).

A function-level import A -> B is fine for a heavy or optional dependency (torch, the engine, openenv, jinja2) or
to keep `import aw_mcp` light; it is a dodge when B already reaches A through module-level imports, i.e. when
hoisting it would close a cycle. Both checks name what they find.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PACKAGES = ("aw_mcp", "engine")


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    module_level: bool


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(name: str) -> str | None:
    """The project module an import of `name` runs: `name` itself, else its longest project prefix."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            resolved = _resolve(alias.name)
            if resolved is not None:
                yield resolved
        return
    if node.level:
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        resolved = submodule if submodule in MODULES else _resolve(source)
        if resolved is not None:
            yield resolved


def _imports(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    out: list[Import] = []

    def visit(node: ast.AST, module_level: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.extend(Import(t, node.lineno, module_level) for t in _targets(node, module, is_package))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # the `else:` of `if TYPE_CHECKING:` runs
                visit(child, module_level)
            return
        inner = module_level and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, True)
    return [i for i in out if i.target != module]


IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}
EDGES = {module: sorted({i.target for i in found if i.module_level}) for module, found in IMPORTS.items()}


Graph = dict[str, list[str]]


def _path(edges: Graph, start: str, goal: str) -> list[str] | None:
    """A shortest import path start -> ... -> goal in `edges`, or None."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    for current in queue:
        if current == goal:
            path: list[str] = []
            node: str | None = current
            while node is not None:
                path.append(node)
                node = previous[node]
            return path[::-1]
        for target in edges.get(current, []):
            if target not in previous:
                previous[target] = current
                queue.append(target)
    return None


def _cycles(edges: Graph) -> list[list[str]]:
    """Each strongly connected component of more than one module, shown as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def connect(v: str) -> None:  # Tarjan; the graph is a few hundred modules, recursion is fine
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, []):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            connect(module)
    cycles = []
    for component in components:
        first = component[0]
        back = next(t for t in edges[first] if t in component)
        inside = {m: [t for t in edges.get(m, []) if t in component] for m in component}
        cycles.append([first, *(_path(inside, back, first) or [back, first])])
    return cycles


def test_the_graph_sees_the_packages() -> None:
    assert {"aw_mcp.world", "aw_mcp.prompting", "engine.llm", "engine.server"} <= set(MODULES)
    assert "aw_mcp.domains" in EDGES["aw_mcp.world"]  # `from aw_mcp.domains import ...`
    assert "aw_mcp.androidworld" in EDGES["aw_mcp.domains"]  # `from aw_mcp import androidworld, ...`
    assert "aw_mcp.env" not in EDGES["aw_mcp"]  # under `if TYPE_CHECKING:` and inside `__getattr__`


def test_the_checks_find_a_cycle_and_name_it() -> None:
    edges = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}
    assert _cycles(edges) == [["a", "b", "c", "a"]]
    assert _cycles({"a": ["b"], "b": []}) == []
    assert _path(edges, "b", "a") == ["b", "c", "a"]  # a function-level a -> b would hide this cycle


def test_a_type_checking_import_is_not_an_edge(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import aw_mcp.world\n"
        "if TYPE_CHECKING:\n    from aw_mcp.prompting import Turn\n"
        "else:\n    import aw_mcp.domains\n"
        "def f():\n    from aw_mcp import templates\n"
        "class C:\n    from aw_mcp.errors import UserError\n"
    )
    (tmp_path / "probe.py").write_text(source, encoding="utf-8")
    found = _imports("aw_mcp.probe", tmp_path / "probe.py")
    assert {(i.target, i.module_level) for i in found} == {
        ("aw_mcp.world", True),
        ("aw_mcp.domains", True),
        ("aw_mcp.templates", False),
        ("aw_mcp.errors", True),
    }


def test_no_import_cycle() -> None:
    cycles = _cycles(EDGES)
    assert not cycles, "import cycles (module-level imports):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_function_level_import_dodges_a_cycle() -> None:
    dodges = []
    for module, found in IMPORTS.items():
        for each in found:
            if each.module_level:
                continue
            back = _path(EDGES, each.target, module)
            if back is not None:
                dodges.append(
                    f"{MODULES[module].relative_to(REPO)}:{each.line}: imports {each.target} inside a function, "
                    f"which imports it back at module level ({' -> '.join(back)})"
                )
    assert not dodges, "function-level imports that hide a cycle:\n" + "\n".join(dodges)
