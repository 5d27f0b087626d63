"""`aw-mcp serve` started at a terminal says what it is and how to connect, and Ctrl-C ends it at once (exit 130)."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys

import pytest

from aw_mcp.commands.serve import terminal_hint
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # an `aw-mcp serve` subprocess on a pseudo-terminal


def test_serve_on_a_tty_prints_the_hint_and_exits_130_on_sigint() -> None:
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aw_mcp", "serve", "--world", "mcp_crm", "--backend", "demo"],
        cwd=str(REPO),
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(terminal)
    try:
        assert proc.stderr is not None
        hint = proc.stderr.readline()  # blocks until the server has said it; no timing involved
        assert hint.startswith("aw-mcp: serving world 'mcp_crm' as an MCP server on stdin/stdout")
        # both suggestions repeat --backend demo: without it a base install has no model to answer with
        assert '"args": ["serve", "--world", "mcp_crm", "--backend", "demo"]' in hint
        assert "`aw-mcp shell --world mcp_crm --backend demo`" in hint
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
        assert proc.stdout is not None and proc.stdout.read() == ""  # stdout stays the protocol's
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)


def test_the_hint_is_one_line_with_a_working_mcp_servers_entry() -> None:
    hint = terminal_hint("faults_payments")
    assert "\n" not in hint and "Ctrl-C" in hint
    assert (
        '{"faults_payments": {"command": "aw-mcp", "args": ["serve", "--world", "faults_payments"]}}' in hint
    )
