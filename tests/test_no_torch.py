"""The base install (no `[engine]` extra) serves, validates and imports without ever importing torch.

Each command runs in a fresh interpreter where torch, transformers, triton, safetensors and tokenizers cannot be
imported (None in sys.modules: any `import` of them raises, and `find_spec` reports them missing), as on a machine
where only `pip install agentworld-mcp` ran.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SUBPROCESS_S

BLOCK = (
    "import sys\n"
    "for name in ('torch', 'transformers', 'triton', 'safetensors', 'tokenizers'):\n"
    "    sys.modules[name] = None\n"
    "from aw_mcp.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "assert 'torch' not in [m for m, v in sys.modules.items() if v is not None], 'torch was imported'\n"
    "sys.exit(code)\n"
)


def without_engine(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK, *args],
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_S,
    )


def test_serve_with_an_unreachable_server_fails_without_torch() -> None:
    # How fast the pre-flight fails is test_preflight's (in-process: a Python start is not what is measured).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    proc = without_engine("serve", "--world", "mcp_crm", "--base-url", url)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert url in proc.stderr and "vllm serve" in proc.stderr and "drop --base-url" in proc.stderr


def test_validate_and_import_openapi_work_without_torch(tmp_path: Path) -> None:
    worlds = [str(p) for p in sorted((REPO / "worlds").glob("*.yaml"))]
    proc = without_engine("validate", *worlds)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "tasks.yaml"
    proc = without_engine("import", "openapi", str(REPO / "docs/examples/tasks-openapi.yaml"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.exists()


def test_local_backend_without_the_engine_extra_says_how_to_install_it() -> None:
    proc = without_engine("serve", "--world", "mcp_crm")  # the default backend is the embedded engine
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "needs the embedded engine, which is not installed (missing: torch, transformers" in proc.stderr
    assert "pip install 'agentworld-mcp[engine]'" in proc.stderr and "--base-url" in proc.stderr
