"""The user-facing error family: mistakes a user can fix, shown by `aw-mcp` as one line (no traceback).

Anything that is not a `UserError` is a bug or an unexpected failure and keeps its traceback. Subclasses also derive
from the builtin their callers have always caught (`ValueError`, `LookupError`), so library code keeps working.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user gave (a file, a flag, a name) or in their set-up; the message says the way out."""

    exit_code: int = 1


class UsageError(UserError, ValueError):
    """A bad command-line flag or argument (exit code 2, as argparse uses)."""

    exit_code = 2


class InputError(UserError, ValueError):
    """A file the user gave cannot be used; the message names the file, line and field."""


class UnknownWorldError(UserError, ValueError):
    """`--world NAME` is neither a file nor a bundled world."""


class ServeError(UserError):
    """The server cannot start here (the port is taken, the backend is unreachable, ...)."""
