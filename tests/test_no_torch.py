"""The base install (no `[engine]` extra) serves, validates and imports without ever importing torch.

The commands run in one fresh interpreter where torch, transformers, triton, safetensors and tokenizers cannot be
imported (None in sys.modules: any `import` of them raises, and `find_spec` reports them missing), as on a machine
where only `pip install agentworld-mcp` ran: each through the entry point's main(argv), with its own stdout and
stderr, and after all of them torch is still not imported.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, SUBPROCESS_S

BLOCK = """\
import contextlib, io, json, logging, sys
for name in ('torch', 'transformers', 'triton', 'safetensors', 'tokenizers'):
    sys.modules[name] = None
from aw_mcp.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    logging.root.handlers.clear()  # each command's logging goes to its own stderr, as in its own process
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
    results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
assert 'torch' not in [m for m, v in sys.modules.items() if v is not None], 'torch was imported'
print(json.dumps(results))
"""


def unreachable_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every command line below, run once in the one interpreter without the engine."""
    url = unreachable_url()
    imported = tmp_path_factory.mktemp("no_torch") / "tasks.yaml"
    commands = {
        "serve_unreachable": ["serve", "--world", "mcp_crm", "--base-url", url],
        "validate": ["validate", *(str(p) for p in sorted((REPO / "worlds").glob("*.yaml")))],
        "import": ["import", "openapi", str(REPO / "docs/examples/tasks-openapi.yaml"), "-o", str(imported)],
        "serve_local": ["serve", "--world", "mcp_crm"],  # the default backend is the embedded engine
    }
    done = subprocess.run(
        [sys.executable, "-c", BLOCK, json.dumps(list(commands.values()))],
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_S,
    )
    assert done.returncode == 0, done.stderr  # torch stayed out, and no command crashed the interpreter
    results = dict(zip(commands, json.loads(done.stdout.splitlines()[-1]), strict=True))
    return {**results, "url": url, "imported": imported}


def test_serve_with_an_unreachable_server_fails_without_torch(ran: dict[str, Any]) -> None:
    # How fast the pre-flight fails is test_preflight's (in-process: a Python start is not what is measured).
    proc, url = ran["serve_unreachable"], ran["url"]
    assert proc["code"] == 1 and "Traceback" not in proc["stderr"]
    assert url in proc["stderr"] and "vllm serve" in proc["stderr"] and "drop --base-url" in proc["stderr"]


def test_validate_and_import_openapi_work_without_torch(ran: dict[str, Any]) -> None:
    assert ran["validate"]["code"] == 0, ran["validate"]["stderr"]
    assert ran["import"]["code"] == 0, ran["import"]["stderr"]
    assert Path(ran["imported"]).exists()


def test_local_backend_without_the_engine_extra_says_how_to_install_it(ran: dict[str, Any]) -> None:
    proc = ran["serve_local"]
    assert proc["code"] == 1 and "Traceback" not in proc["stderr"] and proc["stderr"].count("\n") == 1
    assert "needs the embedded engine, which is not installed (missing: torch, transformers" in proc["stderr"]
    assert "pip install 'agentworld-mcp[engine]'" in proc["stderr"] and "--base-url" in proc["stderr"]
