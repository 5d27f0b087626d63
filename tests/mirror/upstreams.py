"""Where the real third-party MCP servers of the mirror tests are: installed by .ci/run into $AW_UPSTREAMS
(npm packages under node_modules/.bin, PyPI ones in a venv's bin/, each kept apart from aw-mcp's own mcp 2.x), or on
PATH. A test of a server that is absent is skipped, saying how to install it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NPM = {
    "mcp-server-memory": "@modelcontextprotocol/server-memory",
    "mcp-server-filesystem": "@modelcontextprotocol/server-filesystem",
    "mcp-server-everything": "@modelcontextprotocol/server-everything",
}
PYPI = {"mcp-server-time": "mcp-server-time", "mcp-server-git": "mcp-server-git"}


def find(name: str) -> str | None:
    root = os.environ.get("AW_UPSTREAMS")
    if root:
        for sub in ("npm/node_modules/.bin", "py/bin"):
            path = Path(root) / sub / name
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return shutil.which(name)


def upstream(name: str) -> str:
    """The server's executable, or the test is skipped with the way to install it."""
    path = find(name)
    if path is None:
        package = NPM.get(name) or PYPI.get(name)
        how = (
            f"npm install --prefix $AW_UPSTREAMS/npm {package}"
            if name in NPM
            else f"python -m venv $AW_UPSTREAMS/py && $AW_UPSTREAMS/py/bin/pip install {package}"
        )
        pytest.skip(f"{name} is not installed ({how}; .ci/run does it)")
    if name in NPM and shutil.which("node") is None:
        pytest.skip(f"{name} needs node, which is not on PATH")
    return path
