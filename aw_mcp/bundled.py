"""Where the bundled `worlds/` and `prompts/` live: inside the wheel, or at the repository root in a checkout."""

from __future__ import annotations

from pathlib import Path

from aw_mcp.errors import UnknownWorldError

_PACKAGE = Path(__file__).resolve().parent


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


def resolve_world_path(name_or_path: str) -> Path:
    """A path as given, or the name of a bundled world (`mcp_crm` or `mcp_crm.yaml`). Raises UnknownWorldError."""
    path = Path(name_or_path)
    if path.exists():
        return path
    for candidate in (worlds_dir() / name_or_path, worlds_dir() / f"{name_or_path}.yaml"):
        if candidate.exists():
            return candidate
    names = ", ".join(p.stem for p in bundled_worlds())
    raise UnknownWorldError(
        f"no world file {name_or_path!r} and no bundled world of that name; bundled worlds: {names} "
        "(`aw-mcp worlds` describes them)"
    )
