"""aw_mcp's stages and their one direction of dependency, and no import cycle of any kind in aw_mcp/ or engine/.

Every module of the two packages is parsed with `ast` (nothing is imported). Every import statement is an edge: at
module level, inside a function (a lazy import), or under `if TYPE_CHECKING:` (annotations only): a cycle closed by
any of them is still a cycle a reader has to untangle, so all three count. `import a.b` and `from a import b` (b a
submodule) point at `a.b`; `from a import name` (name not a submodule) points at `a`, i.e. `a/__init__.py`. A
submodule import also runs its package's `__init__`; that implicit edge is not counted (as import-linter and pydeps do
not count it).

`LAYERS` is the one place the stage order is written down (docs/ARCHITECTURE.md draws it): a module may import its
own stage and the stages before it, never one after it. So the library (everything below `commands`) never imports
the command line, and the engine never imports aw_mcp.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parent.parent

PACKAGES = ("aw_mcp", "engine")

LAYERS = (
    "aw_mcp.core",  # errors, settings, private files, redaction, JSON lines, model I/O types, the version
    "aw_mcp.spec",  # what a world file says: models, YAML, schema walk/checks, domains, fault and injection specs
    "aw_mcp.trajectory",  # the typed trajectory lines
    "aw_mcp.prompt",  # render, templates, frame, transcript, budget, fit, parse, constraint, grammar text
    "aw_mcp.load",  # a world file read and checked whole (spec + prompt fit + grammar warnings)
    "aw_mcp.backends",  # the contract, openai, local, replay, demo, resolve, preflight
    "aw_mcp.sim",  # the call pipeline, its faults, sessions, registry, ledger, world set-up
    "aw_mcp.eval",  # scorecard, reports, judging, bench
    "aw_mcp.importers",  # OpenAPI / MCP / tools-list -> world file
    "aw_mcp.protocol",  # the MCP server, HTTP guard, fork route, JSON-RPC checks
    "aw_mcp.env",  # aw_mcp.Env, in-process worlds
    "aw_mcp.integrations",  # OpenEnv
    "aw_mcp.commands",  # one module per subcommand
    "aw_mcp.cli",  # the `aw-mcp` entry point
    "aw_mcp.__main__",
    "aw_mcp",  # the package's public API (`aw_mcp.Env`, `__version__`)
)

Kind = Literal["module", "function", "type_checking"]


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    kind: Kind


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

    def visit(node: ast.AST, kind: Kind) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.extend(Import(t, node.lineno, kind) for t in _targets(node, module, is_package))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, "type_checking")
            for child in node.orelse:  # the `else:` of `if TYPE_CHECKING:` runs
                visit(child, kind)
            return
        inner: Kind = (
            "function" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else kind
        )
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, "module")
    return [i for i in out if i.target != module]


IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}
EDGES = {module: sorted({i.target for i in found}) for module, found in IMPORTS.items()}


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


def _package(module: str) -> str:
    """The package a module sits in (a package's own `__init__` sits in itself)."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _packages(edges: Graph) -> Graph:
    """The same graph between packages: A -> B when a module of A imports a module of B (B not A)."""
    out: dict[str, set[str]] = {}
    for module, targets in edges.items():
        here = _package(module)
        out.setdefault(here, set()).update(p for t in targets if (p := _package(t)) != here)
    return {package: sorted(targets) for package, targets in out.items()}


def layer(module: str) -> int:
    """The index in LAYERS of the stage a module belongs to (its longest LAYERS prefix)."""
    matches = [i for i, stage in enumerate(LAYERS) if module == stage or module.startswith(f"{stage}.")]
    assert matches, f"{module} is in no stage: add its folder to LAYERS (and a row to docs/ARCHITECTURE.md)"
    return max(matches, key=lambda i: len(LAYERS[i]))


def _where(module: str, each: Import) -> str:
    return f"{MODULES[module].relative_to(REPO)}:{each.line}"


def test_the_graph_sees_the_packages() -> None:
    assert {"aw_mcp.spec.world", "aw_mcp.prompt.render", "engine.llm", "engine.server"} <= set(MODULES)
    assert "aw_mcp.spec.domains" in EDGES["aw_mcp.spec.world"]  # `from aw_mcp.spec.domains import ...`
    assert (
        "aw_mcp.spec.androidworld" in EDGES["aw_mcp.spec.domains"]
    )  # `from aw_mcp.spec import androidworld`
    assert "aw_mcp.spec.world" in EDGES["aw_mcp.prompt.render"]  # under `if TYPE_CHECKING:`: still an edge
    assert "aw_mcp.env" in EDGES["aw_mcp"]  # under `if TYPE_CHECKING:` and inside `__getattr__`
    assert all(
        m.startswith("aw_mcp.") or m in ("aw_mcp", "engine") or m.startswith("engine.") for m in MODULES
    )


def test_the_checks_find_a_cycle_and_name_it() -> None:
    edges = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}
    assert _cycles(edges) == [["a", "b", "c", "a"]]
    assert _cycles({"a": ["b"], "b": []}) == []
    assert _path(edges, "b", "a") == ["b", "c", "a"]


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import aw_mcp.spec.world\n"
        "if TYPE_CHECKING:\n    from aw_mcp.prompt.render import Turn\n"
        "else:\n    import aw_mcp.spec.domains\n"
        "def f():\n    from aw_mcp.prompt import templates\n"
        "class C:\n    from aw_mcp.core.errors import UserError\n"
    )
    (tmp_path / "probe.py").write_text(source, encoding="utf-8")
    found = _imports("aw_mcp.probe", tmp_path / "probe.py")
    assert {(i.target, i.kind) for i in found} == {
        ("aw_mcp.spec.world", "module"),
        ("aw_mcp.prompt.render", "type_checking"),
        ("aw_mcp.spec.domains", "module"),
        ("aw_mcp.prompt.templates", "function"),
        ("aw_mcp.core.errors", "module"),
    }


def test_the_layer_check_places_modules_by_their_longest_stage() -> None:
    assert LAYERS[layer("aw_mcp.sim.call")] == "aw_mcp.sim"
    assert LAYERS[layer("aw_mcp.cli")] == "aw_mcp.cli"
    assert LAYERS[layer("aw_mcp")] == "aw_mcp"
    assert layer("aw_mcp.core.errors") < layer("aw_mcp.spec.world") < layer("aw_mcp.commands.serve")


def test_no_import_cycle() -> None:
    """Between modules, counting module-level, function-level and TYPE_CHECKING imports."""
    cycles = _cycles(EDGES)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_package_cycle() -> None:
    """Between aw_mcp's packages too: two folders that import each other are one concept split in two. (engine/'s
    root modules and engine/gguf/ import each other, a root package of shared modules, as nano-vllm's is.)"""
    ours = {m: [t for t in targets if t.split(".")[0] == "aw_mcp"] for m, targets in EDGES.items()}
    cycles = _cycles(_packages({m: targets for m, targets in ours.items() if m.split(".")[0] == "aw_mcp"}))
    assert not cycles, "package cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_every_stage_imports_only_earlier_stages() -> None:
    upward = [
        f"{_where(module, each)}: {module} ({LAYERS[layer(module)]}) imports {each.target} "
        f"({LAYERS[layer(each.target)]}), a later stage [{each.kind}]"
        for module, found in IMPORTS.items()
        if module.split(".")[0] == "aw_mcp"
        for each in found
        if each.target.split(".")[0] == "aw_mcp" and layer(each.target) > layer(module)
    ]
    assert not upward, "imports against the stage order (tests/test_import_graph.py LAYERS):\n" + "\n".join(
        upward
    )


def test_the_library_never_imports_the_command_line() -> None:
    cli = layer("aw_mcp.commands")
    offenders = [
        f"{_where(module, each)}: {module} imports {each.target}"
        for module, found in IMPORTS.items()
        if module.split(".")[0] == "aw_mcp" and layer(module) < cli
        for each in found
        if each.target.startswith(("aw_mcp.commands", "aw_mcp.cli"))
    ]
    assert not offenders, "library modules importing the CLI:\n" + "\n".join(offenders)


def test_the_engine_never_imports_aw_mcp() -> None:
    offenders = [
        f"{_where(module, each)}: {module} imports {each.target}"
        for module, found in IMPORTS.items()
        if module.split(".")[0] == "engine"
        for each in found
        if each.target.split(".")[0] == "aw_mcp"
    ]
    assert not offenders, "engine/ must stand alone:\n" + "\n".join(offenders)


def test_shipped_modules_never_import_the_test_fixtures() -> None:
    """engine/testing/ stays out of the wheel (pyproject's hatch `exclude`): nothing that ships may import it."""
    import tomllib

    wheel = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["tool"]["hatch"]["build"]["targets"][
        "wheel"
    ]
    assert "engine/testing" in wheel["exclude"]
    offenders = [
        f"{_where(module, each)}: {module} imports {each.target}"
        for module, found in IMPORTS.items()
        if not module.startswith("engine.testing")
        for each in found
        if each.target.startswith("engine.testing")
    ]
    assert not offenders, "shipped modules importing engine/testing/ (not in the wheel):\n" + "\n".join(
        offenders
    )


def test_the_architecture_page_names_every_stage_and_module() -> None:
    """docs/ARCHITECTURE.md's stage table stays true to the code: each stage of LAYERS and each aw_mcp module."""
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text("utf-8")
    stages = [stage.removeprefix("aw_mcp.") for stage in LAYERS if stage.startswith("aw_mcp.")]
    missing = [s for s in stages if s != "__main__" and f"{s}/" not in page and f"{s}.py" not in page]
    files = [
        p
        for m, p in MODULES.items()
        if m.startswith("aw_mcp.") and p.name not in ("__init__.py", "__main__.py")
    ]
    missing += [
        str(p.relative_to(REPO)) for p in files if f"`{p.name}`" not in page and f"`{p.stem}`" not in page
    ]
    assert not missing, "not in docs/ARCHITECTURE.md's aw_mcp/ table:\n" + "\n".join(missing)
