"""Where the bundled `worlds/` and `prompts/` live: inside the wheel, or at the repository root in a checkout."""

from __future__ import annotations

from pathlib import Path

from aw_mcp.core.errors import UnknownWorldError

_PACKAGE = Path(__file__).resolve().parents[1]  # aw_mcp/


def _data_dir(name: str) -> Path:
    installed = _PACKAGE / "_bundled" / name  # a wheel install (hatch force-include)
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name  # a source checkout or editable install


def worlds_dir() -> Path:
    return _data_dir("worlds")


def prompts_dir() -> Path:
    return _data_dir("prompts")


def bundled_worlds() -> list[Path]:
    return sorted(worlds_dir().glob("*.yaml"))


def bundled_names() -> list[str]:
    return [p.stem for p in bundled_worlds()]


def looks_like_path(name: str) -> bool:
    """A name the user meant as a file: it has a folder part or a YAML suffix."""
    return "/" in name or "\\" in name or name.lower().endswith((".yaml", ".yml"))


def resolve_world_path(name_or_path: str) -> Path:
    """The world file a command's world argument names; every command that takes a world goes through here.

    An existing file is used as given. Otherwise a path-like argument (a folder part, or ending in .yaml/.yml) is a
    missing file, and a bare name is looked up among the bundled worlds (`mcp_crm`; `mcp_crm.yaml` works too).
    Raises UnknownWorldError with the one message each case gets, whichever command asked."""
    path = Path(name_or_path)
    if name_or_path and path.is_file():
        return path
    if name_or_path and "/" not in name_or_path and "\\" not in name_or_path:
        for candidate in (worlds_dir() / name_or_path, worlds_dir() / f"{name_or_path}.yaml"):
            if candidate.is_file():
                return candidate
    names = ", ".join(bundled_names())
    if name_or_path and path.exists():
        raise UnknownWorldError(f"{name_or_path!r} is a folder, not a world file (a YAML file)")
    if looks_like_path(name_or_path):
        raise UnknownWorldError(
            f"no such file: {name_or_path!r} (a world is a YAML file or a bundled world's name: {names})"
        )
    raise UnknownWorldError(
        f"no bundled world named {name_or_path!r} and no file of that name; bundled worlds: {names} "
        "(`aw-mcp worlds` describes them)"
    )
