"""Files that hold calls are owner-only (0600), like the trajectory they come from.

Trajectories, judge results (`*.judge.jsonl`), bench results, scorecard JSON and HTML reports all quote what the
agent sent and the world model answered. Every writer of such a file opens it here: a new file is created 0600 (never
briefly wider), and an existing one with group or other bits is tightened before anything is written to it (one
warning names the old mode). A file that cannot be tightened (another user's) is refused with one line, before any
byte is written to it. On Windows, where modes mean little, files are opened as usual.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import TextIO

from aw_mcp.core.errors import UserError

log = logging.getLogger(__name__)

PRIVATE_MODE = 0o600
_POSIX = os.name == "posix"


class PrivateFileError(UserError, OSError):
    """A file that would hold calls cannot be made owner-only (or cannot be opened)."""


def _tighten(fd: int, path: Path) -> None:
    """Drop group and other permissions of the open file `fd` (the owner's are kept)."""
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if not mode & 0o077:
        return
    try:
        os.fchmod(fd, mode & 0o700)
    except OSError as exc:
        raise PrivateFileError(
            f"{path}: would hold recorded calls but is readable by others (mode {mode:04o}) and cannot be made "
            f"owner-only ({exc.strerror or exc}); chmod 600 it or choose another path"
        ) from None
    log.warning(
        "%s was mode %04o; made it owner-only (%04o): it holds recorded calls", path, mode, mode & 0o700
    )


def open_private(path: str | Path, mode: str = "a") -> TextIO:
    """Open `path` as UTF-8 text for appending ("a") or rewriting ("w"), owner-only. The parent folder is made
    when missing. Raises PrivateFileError (one line) when it cannot be opened or made owner-only."""
    if mode not in ("a", "w"):
        raise ValueError(f"open_private: mode {mode!r}; expected 'a' or 'w'")
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else 0)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, PRIVATE_MODE)
    except OSError as exc:
        raise PrivateFileError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        if _POSIX:
            _tighten(fd, path)
        if mode == "w":
            os.ftruncate(fd, 0)  # only now: a refused file keeps what it had
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_private_text(path: str | Path, text: str) -> None:
    """`path.write_text(text)`, owner-only (see open_private)."""
    with open_private(path, "w") as out:
        out.write(text)
