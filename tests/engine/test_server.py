"""`engine serve` answers in the OpenAI shape, streaming and not, with thinking split into reasoning_content."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from engine import LLM
from engine.cli import build_parser
from engine.server import build_app

CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def base_url(tiny_llm: LLM) -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(tiny_llm, "tiny"), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_health_and_models(base_url: str) -> None:
    assert httpx.get(f"{base_url}/health").json() == {"status": "ok"}
    models = httpx.get(f"{base_url}/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny"


def test_chat_completion_splits_reasoning(base_url: str, tiny_llm: LLM) -> None:
    body = {
        "model": "tiny",
        "messages": CHAT,
        "temperature": 0,
        "max_tokens": 24,
        "ignore_eos": True,
        "thinking_budget": 6,
    }
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60).json()
    choice = reply["choices"][0]
    assert reply["object"] == "chat.completion" and choice["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 24
    expected = tiny_llm.chat(CHAT, _params(body))[0].outputs[0].text
    reasoning, _, answer = expected.partition("</think>")
    assert choice["message"]["reasoning_content"] == reasoning.strip()
    assert choice["message"]["content"] == answer.strip()


def _params(body: dict):
    from engine.server import _sampling_params

    return _sampling_params(body)


def test_thinking_off_gives_all_content(base_url: str, tiny_llm: LLM) -> None:
    body = {
        "messages": CHAT,
        "temperature": 0,
        "max_tokens": 10,
        "ignore_eos": True,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    choice = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60).json()["choices"][0]
    expected = tiny_llm.chat(CHAT, _params(body), enable_thinking=False)[0].outputs[0].text
    assert choice["message"]["content"] == expected.strip()
    assert choice["message"]["reasoning_content"] is None


def test_streaming_matches_non_streaming(base_url: str) -> None:
    body = {
        "messages": CHAT,
        "temperature": 0.7,
        "seed": 5,
        "max_tokens": 20,
        "ignore_eos": True,
        "thinking_budget": 8,
    }
    whole = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60).json()["choices"][0]
    reasoning, content, finish = "", "", None
    with httpx.stream(
        "POST", f"{base_url}/v1/chat/completions", json={**body, "stream": True}, timeout=60
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        chunk = json.loads(line[len("data: ") :])
        assert chunk["object"] == "chat.completion.chunk"
        delta = chunk["choices"][0]["delta"]
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
        finish = chunk["choices"][0]["finish_reason"] or finish
    assert finish == "length"
    assert reasoning.strip() == whole["message"]["reasoning_content"]
    assert content.strip() == whole["message"]["content"]


def test_bad_requests(base_url: str) -> None:
    assert httpx.post(f"{base_url}/v1/chat/completions", json={"messages": []}).status_code == 400
    bad = {"messages": CHAT, "temperature": -1}
    assert httpx.post(f"{base_url}/v1/chat/completions", json=bad).status_code == 400


def test_concurrent_requests_are_served(base_url: str) -> None:
    body = {"messages": CHAT, "temperature": 0, "max_tokens": 8, "ignore_eos": True}
    results: list[dict] = []

    def ask() -> None:
        results.append(httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60).json())

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len({json.dumps(r["choices"][0]["message"]) for r in results}) == 1


def test_cli_parser() -> None:
    args = build_parser().parse_args(
        ["serve", "--model", "/x", "--port", "9", "--hf-compat-dtypes", "--dtype", "bf16"]
    )
    assert (args.model, args.port, args.host, args.hf_compat_dtypes, args.dtype) == (
        "/x",
        9,
        "127.0.0.1",
        True,
        "bf16",
    )


def test_cli_reports_unloadable_model(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    (tmp_path / "config.json").write_text("{}")
    assert main(["serve", "--model", str(tmp_path)]) == 2
    assert "cannot load the model" in capsys.readouterr().err
