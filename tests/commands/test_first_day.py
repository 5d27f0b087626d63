"""A newcomer's mistakes (issue 32): each one ends in a clear line or an isError naming its cause, never a hang, a
silent wrong behaviour or a traceback. In-process (`main(argv)`), no subprocess, no model."""

from __future__ import annotations

import io
import os
import socket
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from aw_mcp.cli import build_parser, main
from aw_mcp.core.errors import UsageError
from aw_mcp.sim.world_setup import WorldOptions, setup_world
from tests.conftest import ENGINE

BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE, as a shell reports a Unix tool whose reader went away
needs_engine = pytest.mark.skipif(
    not ENGINE, reason="needs the [engine] extra (torch, transformers, xgrammar)"
)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# --- 1. a model that cannot load: every call says why, at once ------------------------------------------------------


@needs_engine
@pytest.mark.anyio
async def test_a_load_failure_after_start_is_an_is_error_naming_it_for_every_call(
    monkeypatch: pytest.MonkeyPatch, small_world_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `--device cuda` on a CPU-only torch did: torch's AssertionError (not a load error the backend knew)
    escaped the start-up load, cancelled the server's task group, and every tools/call then waited forever."""
    import engine
    from aw_mcp.backends.local import LocalWorldModel
    from aw_mcp.load.world import load_world
    from aw_mcp.protocol.server import WorldApp, backend_lifetime, build_server
    from aw_mcp.sim.registry import SessionRegistry
    from aw_mcp.sim.simulator import Simulator

    loads: list[str] = []

    def llm(model: str, **options: object) -> None:
        loads.append(model)
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(engine, "LLM", llm)
    world = load_world(small_world_path)
    simulator = Simulator(world, LocalWorldModel("/models/ckpt", device="cuda"), SessionRegistry(world))
    app = WorldApp(simulator, small_world_path.read_text())
    with anyio.fail_after(60):  # a bound for "never": the old server hung here
        async with backend_lifetime(app), Client(build_server(app)) as client:
            first = await client.call_tool("get_order", {"order_id": "ORD-1"})
            second = await client.call_tool("get_order", {"order_id": "ORD-2"})
    for result in (first, second):
        assert result.is_error
        assert "Torch not compiled with CUDA enabled" in result.content[0].text
    assert loads == ["/models/ckpt"]  # loaded once: the kept failure answers the later calls
    err = capsys.readouterr().err
    assert err.count("Torch not compiled with CUDA enabled") == 1  # logged once, where the operator looks


@needs_engine
def test_device_cuda_without_cuda_is_one_line_before_serving(
    monkeypatch: pytest.MonkeyPatch, small_world_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    monkeypatch.setattr(
        torch.version, "cuda", "12.4"
    )  # a CUDA build of torch on a machine with no GPU visible
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = [
        "serve",
        "--world",
        str(small_world_path),
        "--backend",
        "local",
        "--model",
        "tiny",
        "--device",
        "cuda",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--device cuda: no CUDA GPU is visible" in err and "--device cpu" in err


@needs_engine
def test_engine_serve_device_cuda_without_cuda_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build, as this machine's
    assert main(["engine", "serve", "--model", "tiny", "--device", "cuda", "--port", "8000"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--device cuda: this PyTorch" in err and "without CUDA" in err


# --- 2. arguments checked before anything starts --------------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_a_port_outside_1_65535_is_refused(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["serve", "--world", "mcp_crm", "--transport", "http", "--port", port])
    assert info.value.code == 2
    assert "1-65535" in capsys.readouterr().err


@needs_engine
def test_engine_serve_refuses_a_port_outside_1_65535(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["engine", "serve", "--model", "tiny", "--port", "99999"])
    assert "1-65535" in capsys.readouterr().err


@needs_engine
def test_engine_serve_binds_its_port_before_loading_the_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.llm import LLM

    loaded: list[object] = []
    monkeypatch.setattr(LLM, "from_options", classmethod(lambda cls, options: loaded.append(options)))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["engine", "serve", "--model", "tiny", "--device", "cpu", "--port", str(port)])
    assert code == 2 and loaded == []  # the old command loaded the whole model, then failed (exit 3)
    assert "Address already in use" in capsys.readouterr().err


def test_resume_of_a_missing_file_is_an_error_that_says_how_to_record(
    small_world_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.jsonl"
    argv = [
        "call",
        "--world",
        str(small_world_path),
        "--backend",
        "demo",
        "--resume",
        str(missing),
        "get_order",
    ]
    assert main([*argv, "--args", '{"order_id": "ORD-1001"}']) == 2
    line = last_line(capsys.readouterr().err)
    assert "no such trajectory" in line and f"--record {missing}" in line
    assert not missing.exists()  # the old command created it empty, started fresh and exited 0


@needs_engine
def test_a_context_too_small_for_the_world_is_refused_with_the_figure_needed() -> None:
    options = WorldOptions(world="mcp_crm", backend="local", model="tiny", max_model_len=1024)
    with pytest.raises(UsageError) as info:
        setup_world(options)
    message = str(info.value)
    assert "--max-model-len 1024 is too small" in message
    needed = int(message.split("Pass --max-model-len ")[1].split()[0])
    assert needed > 1024
    # the figure is enough: the world fits the context it names
    assert setup_world(WorldOptions(world="mcp_crm", backend="local", model="tiny", max_model_len=needed))


def test_a_base_url_without_a_scheme_gets_the_same_words_from_the_flag_and_the_variable(
    small_world_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["call", "--world", str(small_world_path), "get_order", "--args", '{"order_id": "ORD-1001"}']
    assert main([*argv, "--base-url", "127.0.0.1:8000/v1"]) == 1
    from_flag = last_line(capsys.readouterr().err)
    monkeypatch.setenv("AW_BASE_URL", "127.0.0.1:8000/v1")
    assert main(argv) == 1
    from_variable = last_line(capsys.readouterr().err)
    expected = "expected an http(s) URL such as http://127.0.0.1:8000/v1"
    assert expected in from_flag and expected in from_variable
    assert "vllm serve" not in from_flag  # the old flag got "start the model server" advice


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["serve", "--wrld", "mcp_crm"], "--world"),
        (["call", "--world", "mcp_crm", "--backnd", "demo", "get_order"], "--backend"),
        (["report", "run.jsonl", "--fail-onn", "gave-up"], "--fail-on"),
    ],
)
def test_an_unknown_flag_close_to_a_known_one_says_did_you_mean(
    argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert f"did you mean {meant}?" in capsys.readouterr().err


def test_a_flag_after_double_dash_and_an_abbreviation_are_not_misspellings() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "--wor", "mcp_crm", "--back", "demo"])
    assert (args.world, args.backend) == ("mcp_crm", "demo")
    args = parser.parse_args(["import", "mcp", "-o", "x.yaml", "--", "npx", "--wrld"])
    assert args.command == "import"


# --- 3. a closed pipe ends quietly -----------------------------------------------------------------------------------


def closed_pipe() -> io.TextIOWrapper:
    """A stdout whose reader is gone (`| head -1` after its line). Set inside the test: pytest's capture puts its
    own sys.stdout back when the test starts, over one a fixture set."""
    read, write = os.pipe()
    os.close(read)
    return io.TextIOWrapper(os.fdopen(write, "wb"), write_through=False)


def test_worlds_into_a_closed_pipe_exits_141_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", closed_pipe())
    assert main(["worlds"]) == BROKEN_PIPE_EXIT


def test_shell_json_into_a_closed_pipe_exits_141_without_a_traceback(
    small_world_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = "".join('get_order {"order_id": "ORD-1001"}\n' for _ in range(50))
    monkeypatch.setattr(sys, "stdin", io.StringIO(calls))
    monkeypatch.setattr(sys, "stdout", closed_pipe())
    assert (
        main(["shell", "--world", str(small_world_path), "--backend", "demo", "--json"]) == BROKEN_PIPE_EXIT
    )


def test_a_model_server_context_too_small_for_the_world_is_refused_at_start(
    small_world_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM started with --max-model-len 1024 (its /v1/models says so): serving mcp_crm would refuse every call."""
    from tests.fake_openai import ScriptedOpenAIServer

    with ScriptedOpenAIServer(lambda body, n: None, model_card={"max_model_len": 1024}) as server:
        argv = ["serve", "--world", "mcp_crm", "--base-url", server.base_url, "--model", server.model]
        assert main(argv) == 2
    line = last_line(capsys.readouterr().err)
    assert "serves a context of 1,024 tokens" in line and "vLLM: --max-model-len" in line
