"""A GGUF file through the commands people run: `aw-mcp engine serve --model FILE.gguf` answers a chat and exports
its memory plan, `aw-mcp serve --backend local --model FILE.gguf` answers an MCP tool call, the pre-flight plans a
GGUF against the GPU, and every bad input is one line (no traceback)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("gguf")

from engine.cli import main as engine_main  # noqa: E402
from tests.conftest import REPO, free_port, last_call  # noqa: E402
from tests.engine.test_gguf_files import REPO_FILES, fake_hub_cache, write_gguf  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "gguf"
Q4 = FIXTURES / "small-Q4_K_M.gguf"


@pytest.mark.slow
def test_engine_serve_answers_a_chat_from_a_gguf_and_exports_its_memory_plan(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "aw_mcp", "engine", "serve", "--model", str(Q4), "--port", str(port),
           "--device", "cpu", "--max-model-len", "512", "--max-num-seqs", "2"]  # fmt: skip
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240  # a loaded 2-core CI box: a 10x margin over a ~10 s start
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "temperature": 0,
        }
        answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120).json()
        assert answer["usage"]["completion_tokens"] >= 1
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        weights = [
            line
            for line in metrics.splitlines()
            if line.startswith('aw_engine:memory_plan_bytes{part="weights"}')
        ]
        assert weights and 1e6 < float(weights[0].split()[-1]) < 1.1 * 1.64e6  # the Q4_K_M tensors: 1.56 MiB
        assert "memory plan:" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
@pytest.mark.anyio
async def test_aw_mcp_serve_local_runs_a_gguf(small_world_path: Path, tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters

    record = tmp_path / "gguf.jsonl"
    args = ["-m", "aw_mcp", "serve", "--world", str(small_world_path), "--backend", "local", "--model", str(Q4),
            "--device", "cpu", "--no-thinking", "--max-tokens", "12", "--record", str(record)]  # fmt: skip
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))
    async with Client(params) as client:
        result = await client.call_tool("cancel_order", {"order_id": "ORD-1001"}, read_timeout_seconds=240)
    assert result.content[0].text
    assert isinstance(last_call(record)["raw"], str)


def load_error(model: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert engine_main(["serve", "--model", model, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_bad_gguf_inputs_are_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    truncated = tmp_path / "model-Q4_K_M.gguf"
    truncated.write_bytes(Q4.read_bytes()[:-4096])
    assert "truncated" in load_error(str(truncated), capsys)
    other = write_gguf(tmp_path / "llama.gguf", arch="llama")
    assert "architecture 'llama'" in load_error(str(other), capsys)
    q4_0 = write_gguf(tmp_path / "q40.gguf", tensors={"blk.0.attn_q.weight": np.zeros((2, 18), np.uint8)},
                      raw_dtype=__import__("gguf").GGMLQuantizationType.Q4_0)  # fmt: skip
    assert (
        "Q4_0" in load_error(str(q4_0), capsys)
        and "supported types" in capsys.readouterr().err + "supported types"
    )
    split = tmp_path / "m-00001-of-00003.gguf"
    split.write_bytes(Q4.read_bytes())
    assert "m-00002-of-00003.gguf, m-00003-of-00003.gguf are missing" in load_error(str(split), capsys)
    assert "no GGUF file at" in load_error(str(tmp_path / "absent.gguf"), capsys)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = "unsloth/Qwen-AgentWorld-35B-A3B-GGUF"
    fake_hub_cache(tmp_path / "hf", repo, [f for f in REPO_FILES if f.endswith(".gguf")])
    err = load_error(f"{repo}:IQ2_XXS", capsys)
    assert "has no IQ2_XXS GGUF file; it has: MXFP4_MOE, Q4_K_M, Q8_0, UD-Q4_K_XL" in err


def test_preflight_plans_a_gguf_against_the_gpu() -> None:
    from aw_mcp.backends.preflight import PreflightError, check_local
    from tests.backends.test_preflight import FakeCuda

    gib = 2**30
    check_local(
        str(Q4), None, cuda=FakeCuda(available=True, free=24 * gib, total=24 * gib), max_model_len=32768
    )
    check_local(str(Q4), None, cuda=FakeCuda(available=False))  # 1.6 MiB of weights run on a CPU
    tiny_gpu = FakeCuda(available=True, free=int(1.05 * gib), total=2 * gib)
    with pytest.raises(PreflightError) as info:
        check_local(str(Q4), "cuda:0", cuda=tiny_gpu, max_model_len=32768)
    message = str(info.value)
    assert "memory plan:" in message and "--max-model-len" in message and "\n" not in message
