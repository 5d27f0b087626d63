"""The command line's argparse pieces every command shares: one-line errors, "did you mean" for a misspelt flag, and
the TCP port type (1-65535: the OS would take 99999 modulo 65536 and serve on 34463)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import NoReturn

MAX_PORT = 65535


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (`aw-mcp serve: error: ...; see aw-mcp serve --help`), not the usage,
    and a flag close to a known one is named before anything else is checked (`--wrld` says "did you mean
    --world?", not "--world is required")."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if args is not None and self._subparsers is None and not self._takes_remainder():
            misspelt = self.misspelt_flag(args)
            if misspelt is not None:
                flag, known = misspelt
                self.error(f"unrecognized argument {flag}: did you mean {known}?")
        return super().parse_known_args(args, namespace)

    def _takes_remainder(self) -> bool:
        return any(action.nargs == argparse.REMAINDER for action in self._actions)

    def misspelt_flag(self, args: Sequence[str]) -> tuple[str, str] | None:
        """The first `--flag` that is neither a flag of this command nor an abbreviation of one, but is close to
        one: (what was typed, the flag meant)."""
        flags = [option for option in self._option_string_actions if option.startswith("--")]
        for arg in args:
            if arg == "--":  # what follows is another program's command line
                return None
            if not arg.startswith("--"):
                continue
            typed = arg.split("=", 1)[0]
            if typed in self._option_string_actions or any(flag.startswith(typed) for flag in flags):
                continue
            close = difflib.get_close_matches(typed, flags, n=1, cutoff=0.6)
            if close:
                return typed, close[0]
        return None


def port_number(text: str) -> int:
    """argparse type for a TCP port."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (1-{MAX_PORT}), got {text!r}") from None
    if not 1 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is 1-{MAX_PORT}, got {port}")
    return port
