"""The code blocks of the README and of every documentation page (docs/*.md, the mkdocs site) run as written,
against the versions pyproject.toml pins (issues 22 and 30).

Each fenced block carries a marker (tests/readme_snippets.py): `runnable: python|shell|world|server` blocks are run
here, `not run: REASON` blocks say why not, and configuration / output blocks (json, yaml, text) need no marker
but must parse. A new python or shell block without a marker fails `test_every_block_is_marked_or_an_example`.

How runnable blocks run:
- in a fresh folder holding copies of `worlds/` and `docs/` (so `-o worlds/tasks.yaml` never touches the checkout),
  with this environment's `aw-mcp` and `python` first on PATH;
- as in the base install (`pip install -e .`, no `[engine]` extra): torch, transformers, triton, safetensors and
  tokenizers cannot be imported (None in sys.modules, as tests/test_no_torch.py does) in the snippet's process and
  in every `python` / `aw-mcp` it starts by name (wrappers first on PATH set PYTHONPATH for them);
- python: as a script (`python snippet.py`); a snippet that imports a package of an extra that is not installed
  here (OPTIONAL: fastmcp and openenv come with `[openenv]`) is skipped, naming it; any other missing import fails;
- shell: with `bash -euo pipefail`; lines that install packages (`pip install`, `python3 -m venv`, `npm install`)
  are skipped, as this environment is installed already; a whole-line `# TEXT` comment shows what the command above
  it prints, and the output must contain TEXT (`...` stands for anything);
- world: written to a file and checked with `aw-mcp validate`;
- server: started in the background for the runnable block right after it, stopped afterwards (skipped when its
  port is taken here).

Not run (each block's marker says which): installing (the engine extra), what a test machine does not have (a GPU
and the model's weights, a model server, npx and the network, a session recorded earlier), clients that are not this
project's dependencies or need mcp 1.x (openai-agents, pydantic-ai, langchain-mcp-adapters, the mcp 1.x client), and
the test suite's own command line. Python ones must still compile as self-contained scripts (no top-level `await`).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from aw_mcp.backends import engine_extra
from tests.conftest import REPO
from tests.readme_snippets import (
    EXAMPLE_LANGUAGES,
    MARKER,
    PAGES,
    README,
    RUNNABLE_KINDS,
    Block,
    all_blocks,
    blocks,
    page_name,
)

BLOCKED = ("torch", "transformers", "triton", "safetensors", "tokenizers")
PRELUDE = "import sys\nfor _name in {blocked!r}:\n    sys.modules[_name] = None\ndel _name\n"
INSTALL_LINE = re.compile(r"^\s*(pip3? install\b|python3? -m (venv|pip install)\b|npm install\b)")
# Packages of an extra that the documentation's snippets use: without the extra, those snippets are skipped.
OPTIONAL = {"fastmcp": "[openenv]", "openenv": "[openenv]"}
TIMEOUT_S = 240  # generous: the 2-core test machine is often shared; the blocks take seconds
BLOCKS = all_blocks()


def runnable(*kinds: str) -> list[Block]:
    return [b for b in BLOCKS if b.marker == "runnable" and b.detail in kinds]


def served(block: Block) -> bool:
    """Whether the block runs with the `runnable: server` block right before it (on the same page)."""
    index = BLOCKS.index(block)
    return index > 0 and BLOCKS[index - 1].kind == "server" and BLOCKS[index - 1].page == block.page


# --- markers and examples (fast) ---


def marker_problems(text: str, path: Path = README) -> list[str]:
    """What is wrong with the markers of a page's text: blocks that are neither marked nor examples, markers that
    do not fit their block, reasons too short to say anything, markers away from a fence."""
    found, problems = blocks(text, path), []
    for index, block in enumerate(found):
        if block.marker is None and block.lang not in EXAMPLE_LANGUAGES:
            problems.append(
                f"{block.where}: no marker; put `<!-- runnable: KIND -->` or `<!-- not run: REASON -->` "
                "on the line before the fence"
            )
        elif block.marker == "runnable" and block.lang not in RUNNABLE_KINDS.get(block.detail, ()):
            problems.append(f"{block.where}: `runnable: {block.detail}` does not fit a {block.lang!r} block")
        elif block.marker == "not run" and len(block.detail.split()) < 3:
            problems.append(f"{block.where}: `not run` needs a reason of a few words, not {block.detail!r}")
        if block.kind == "server":
            follower = found[index + 1] if index + 1 < len(found) else None
            if follower is None or follower.marker != "runnable" or follower.kind == "server":
                problems.append(
                    f"{block.where}: a `runnable: server` block must be followed by a runnable block"
                )
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if MARKER.match(line) and (number >= len(lines) or not lines[number].lstrip().startswith("```")):
            problems.append(
                f"{page_name(path)}:{number}: a marker must sit on the line right before a code fence"
            )
    return problems


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_every_block_is_marked_or_an_example(page: Path) -> None:
    problems = marker_problems(page.read_text(encoding="utf-8"), page)
    assert not problems, "\n".join(problems)


def test_the_pages_checked_are_the_sites_pages() -> None:
    """The pages whose blocks run here are the pages of the site: each docs/*.md is in mkdocs.yml's nav, and the nav
    names no page that is not there (mkdocs build --strict in .ci/run fails on both as well)."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = {next(iter(entry.values())) for entry in config["nav"]}
    on_disk = {page_name(page).removeprefix("docs/") for page in PAGES if page != README}
    assert in_nav == on_disk, f"in the nav only: {in_nav - on_disk}; on disk only: {on_disk - in_nav}"


def test_an_unmarked_snippet_fails_the_marker_check() -> None:
    fence = "```"
    text = (
        f"# T\n\n{fence}bash\naw-mcp worlds\n{fence}\n\n<!-- not run: no -->\n{fence}python\nprint(1)\n{fence}\n\n"
        f"<!-- runnable: python -->\n\n{fence}python\nprint(2)\n{fence}\n\n{fence}yaml\na: 1\n{fence}\n"
    )
    problems = marker_problems(text)
    assert len(problems) == 4, problems
    assert "README.md:3 (bash block under 'T'): no marker" in problems[0]
    assert "needs a reason" in problems[1] and "no marker" in problems[2] and "right before" in problems[3]


def test_the_documentation_has_blocks_of_each_kind() -> None:
    """A guard against the parser silently finding nothing (a changed fence style, moved pages)."""
    kinds = {b.detail for b in BLOCKS if b.marker == "runnable"}
    assert {"python", "shell", "world", "server"} <= kinds
    assert len(BLOCKS) > 20
    assert len(PAGES) > 10 and len({b.page for b in BLOCKS if b.marker == "runnable"}) >= 5


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in ("json", "yaml")], ids=lambda b: b.where)
def test_configuration_examples_parse(block: Block) -> None:
    if block.lang == "json":
        json.loads(block.code)
    else:
        yaml.safe_load(block.code)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "python"], ids=lambda b: b.where)
def test_python_snippets_are_self_contained_scripts(block: Block) -> None:
    """Every python block, run or not, compiles as a module: no top-level `await` / `async with` that a copied
    snippet could not run; one that starts `aw-mcp serve` does it with `--backend demo`, as the pages say the
    snippets were run (replace it with your backend flags for real answers)."""
    compile(block.code, block.where, "exec")
    if '"serve"' in block.code and '"aw-mcp"' in block.code:
        assert '"--backend", "demo"' in block.code, f"{block.where}: starts a server without --backend demo"


# --- running the runnable blocks (slow: each starts processes) ---


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working folder with copies of worlds/ and docs/, and an environment without the engine's packages."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("worlds", "docs"):
        shutil.copytree(REPO / name, work / name)
    prelude = tmp_path / "prelude"
    prelude.mkdir()
    (prelude / "sitecustomize.py").write_text(PRELUDE.format(blocked=BLOCKED))
    venv_bin = Path(sys.executable).parent
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    targets = {"python": sys.executable, "python3": sys.executable, "aw-mcp": str(venv_bin / "aw-mcp")}
    for name, target in targets.items():
        wrapper = wrappers / name
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{prelude}" exec "{target}" "$@"\n')
        wrapper.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AW_", "PYTHON"))}
    env.update(
        PATH=os.pathsep.join([str(wrappers), str(venv_bin), env.get("PATH", "")]),
        PYTHONPATH=str(prelude),
        TMPDIR=str(tmp_path / "tmp"),  # `aw-mcp demo` writes its report under a new temporary folder
        HF_HUB_OFFLINE="1",
    )
    return work, env


def missing_imports(code: str) -> list[str]:
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    missing = sorted(n for n in names if n not in BLOCKED and importlib.util.find_spec(n) is None)
    unknown = [n for n in missing if n not in OPTIONAL]
    assert not unknown, f"imports {unknown}, which no dependency or extra of this package installs"
    return [f"{n} (the {OPTIONAL[n]} extra)" for n in missing]


def shell_script(code: str) -> tuple[str, list[str]]:
    """The block without its install lines, and the outputs its `# TEXT` lines promise."""
    commands, expected = [], []
    for line in code.splitlines():
        if INSTALL_LINE.match(line):
            continue
        if line.startswith("# "):
            expected.append(line[2:].strip())
        else:
            commands.append(line)
    assert any(c.strip() for c in commands), "nothing left to run once the install lines are skipped"
    return "\n".join(commands) + "\n", expected


def contains(output: str, promised: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in promised.split("..."))
    return re.search(pattern, output) is not None


def run_block(block: Block, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if block.detail == "python":
        missing = missing_imports(block.code)
        if missing:
            pytest.skip(f"{block.where} needs {', '.join(missing)}, not installed here")
        script = work / "snippet.py"
        script.write_text(block.code)
        command = [sys.executable, str(script)]
    elif block.detail == "shell":
        script_text, _ = shell_script(block.code)
        command = ["bash", "-euo", "pipefail", "-c", script_text]
    elif block.detail == "world":
        (work / "world.yaml").write_text(block.code)
        command = ["aw-mcp", "validate", "world.yaml"]
    else:
        raise AssertionError(f"{block.where}: cannot run a {block.detail!r} block")
    proc = subprocess.run(
        command,
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{block.where} failed (exit {proc.returncode}):\n{output[-4000:]}"
    assert "Traceback" not in output, f"{block.where}:\n{output[-4000:]}"
    if block.detail == "shell":
        for promised in shell_script(block.code)[1]:
            assert contains(output, promised), (
                f"{block.where}: no {promised!r} in its output:\n{output[-4000:]}"
            )
    return proc


def port_of(command: str) -> int:
    found = re.search(r"--port[ =](\d+)", command)
    assert found, f"a server block names its --port: {command!r}"
    return int(found.group(1))


def port_taken(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def ids(block: Block) -> str:
    return f"{block.detail}@{block.page}:{block.line}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in runnable("python", "shell", "world") if not served(b)], ids=ids)
def test_runnable_block(block: Block, sandbox: tuple[Path, dict[str, str]]) -> None:
    run_block(block, *sandbox)


@pytest.mark.slow
@pytest.mark.parametrize("server", runnable("server"), ids=ids)
def test_server_block_and_its_client(server: Block, sandbox: tuple[Path, dict[str, str]]) -> None:
    work, env = sandbox
    client = BLOCKS[BLOCKS.index(server) + 1]
    missing = missing_imports(client.code) if client.detail == "python" else []
    if missing:
        pytest.skip(f"{client.where} needs {', '.join(missing)}, not installed here")
    command = server.code.strip()
    port = port_of(command)
    if port_taken(port):
        pytest.skip(f"port {port}, which {server.where} serves on, is taken on this machine")
    log = work / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + TIMEOUT_S  # a bound for a hung start, not a speed check
        while not accepts(port):
            assert proc.poll() is None, f"{server.where} exited:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"{server.where} did not listen:\n{log.read_text()[-4000:]}"
            time.sleep(0.2)
        run_block(client, work, env)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert not unexpected_tracebacks(text), text[-4000:]


# A client that is done may hang up while the server still answers it; uvicorn and starlette then log a traceback
# whose exceptions are all of these kinds. A traceback with any other exception in a server's log fails the test.
DISCONNECTS = ("ClientDisconnected", "WebSocketDisconnect", "ConnectionClosed", "ConnectionClosedOK",
               "ConnectionClosedError")  # fmt: skip
EXCEPTION_LINE = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception|Disconnect|Disconnected|Closed\w*)))\b"
)


def unexpected_tracebacks(log: str) -> list[str]:
    """The exceptions in a server log's tracebacks other than a client hanging up (the exception lines)."""
    if "Traceback (most recent call last):" not in log:
        return []
    found = []
    for line in log.splitlines():
        match = EXCEPTION_LINE.match(line)
        if match and match.group(2) not in DISCONNECTS:
            found.append(line.strip())
    return found


def test_only_a_client_hanging_up_is_a_tolerated_server_traceback() -> None:
    benign = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in send\n    raise ClientDisconnected()\n'
    )
    benign += "uvicorn.protocols.utils.ClientDisconnected\n"
    real = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nKeyError: "k"\n'
    assert unexpected_tracebacks("ok\n" + benign) == []
    assert unexpected_tracebacks(benign + real) == ['KeyError: "k"']


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


# --- the world-file example and the first hour's messages ---


def world_example() -> Block:
    (block,) = [b for b in runnable("world") if b.heading == "World spec reference"]
    return block


@pytest.mark.slow
def test_the_world_examples_commented_screen_keys_are_valid_once_uncommented(
    sandbox: tuple[Path, dict[str, str]],
) -> None:
    """`# screen:` / `# task:` are top-level keys of the screen domains: uncommented (in an `os` world) the example
    still validates, rather than splitting `state:` from its records."""
    work, env = sandbox
    lines = []
    for line in world_example().code.splitlines():
        if line.startswith(("# screen:", "#   ", "# task:")):
            line = line[2:]
        lines.append(re.sub(r"^domain: mcp\b", "domain: os ", line))
    text = "\n".join(lines) + "\n"
    assert "\nscreen: |" in text and "\ntask: " in text
    (work / "screen_world.yaml").write_text(text)
    proc = subprocess.run(
        ["aw-mcp", "validate", "screen_world.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def engine_missing_message(monkeypatch: pytest.MonkeyPatch) -> str:
    real = engine_extra.importlib.util.find_spec
    monkeypatch.setattr(
        engine_extra.importlib.util, "find_spec", lambda name: None if name == "torch" else real(name)
    )
    with pytest.raises(engine_extra.EngineNotInstalledError) as info:
        engine_extra.require_engine("--backend local")
    return str(info.value)


def test_the_engine_missing_message_says_what_hardware_it_needs_before_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = engine_missing_message(monkeypatch)
    assert "\n" not in message
    install = message.index("pip install 'agentworld-mcp[engine]'")
    for needed in ("75 GiB", "GGUF", "24 GB", "Q4_K_M", "32k", "--model FILE.gguf"):
        assert 0 <= message.find(needed) < install, f"{needed!r} is not said before the install command"
    assert "--base-url" in message[install:] and "aw-mcp demo" in message[install:]


def test_the_readme_says_what_hardware_the_engine_needs_before_installing_it() -> None:
    text = README.read_text(encoding="utf-8")
    quick_start = text[text.index("## Quick start") :]
    before_install = quick_start[: quick_start.index("pip install -e '.[engine]'")]
    for needed in ("75 GiB", "GGUF", "24 GB"):
        assert needed in before_install, f"the Quick start says {needed!r} only after the engine install"
    (row,) = [line for line in text.splitlines() if line.startswith("| `pip install -e '.[engine]'`")]
    for needed in ("75 GiB", "GGUF", "--model FILE.gguf"):
        assert 0 <= row.find(needed) < row.index("adds the embedded engine"), (
            f"{needed!r}: not before the packages"
        )
    for package in ("xgrammar", "gguf", "torch", "transformers", "triton"):
        assert package in row, f"the engine extra's row does not name {package}"


def test_the_sites_table_rows_read_an_escaped_pipe_in_code_as_a_pipe() -> None:
    """docs/hooks/table_pipes.py (mkdocs.yml's hook): `\\|` in a table row's code span is `|` on the site, as on
    GitHub; outside code spans, and outside tables, the text is left as written."""
    spec = importlib.util.spec_from_file_location("table_pipes", REPO / "docs" / "hooks" / "table_pipes.py")
    assert spec and spec.loader
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = "| `serve [--backend openai\\|local]` | a \\| b |\ntext `x\\|y`\n"
    assert hook.on_page_markdown(page) == "| `serve [--backend openai|local]` | a \\| b |\ntext `x\\|y`\n"


def test_the_readme_stays_a_front_page() -> None:
    """The README is the quick start and the links (issue 30: about 250 lines at most); the manual is docs/."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for page in PAGES[1:]:
        if page.name != "index.md":
            assert f"](docs/{page.name})" in text, f"the README links no {page_name(page)}"
