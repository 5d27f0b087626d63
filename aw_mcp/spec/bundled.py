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


# The bundled worlds, by name: the package's own list, not whatever sits in the folder (a world a user imports
# into a checkout's worlds/ is their file, not a bundled world). A new bundled world is added here too
# (tests/spec/test_bundled_worlds.py checks the list against the files the repository tracks).
BUNDLED_WORLDS = (
    "android_phone",
    "faults_payments",
    "fictional_airline",
    "mcp_crm",
    "os_desktop",
    "search_python_release",
    "swe_bugfix",
    "terminal_devbox",
    "web_shop",
)


def bundled_worlds() -> list[Path]:
    return [worlds_dir() / f"{name}.yaml" for name in BUNDLED_WORLDS]


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
        name = name_or_path.removesuffix(".yaml")
        if name in BUNDLED_WORLDS:
            return worlds_dir() / f"{name}.yaml"
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
