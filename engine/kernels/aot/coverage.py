"""Which Triton kernels the engine's code can launch: every `kernel[grid](...)` in a module of `engine/` whose
`kernel` is a `triton.jit` function of that module. The check fails when one of them was never launched by its
scenarios, so a kernel added on a path the scenarios do not reach is noticed instead of silently unchecked."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from triton.runtime.jit import JITFunction

import engine

_SKIP = ("engine.kernels.aot", "engine.testing")


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def launch_sites(root: Path | None = None) -> set[tuple[str, str]]:
    """(module, kernel name) of every Triton launch written in the engine's source."""
    root = root or Path(engine.__file__).parent
    sites: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        module_name = _module_name(path, root)
        source = path.read_text()
        if module_name.startswith(_SKIP) or "triton" not in source:
            continue
        launched = {
            node.func.value.id
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)
        }
        if not launched:
            continue
        module = importlib.import_module(module_name)
        sites.update(
            (getattr(module, name).module, getattr(module, name).fn.__qualname__)
            for name in launched
            if isinstance(getattr(module, name, None), JITFunction)
        )
    return sites
