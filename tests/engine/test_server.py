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
from tests.conftest import free_port

CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def base_url(tiny_llm: LLM) -> Iterator[str]:
    port = free_port()
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
    from engine.server import ChatCompletionRequest

    return ChatCompletionRequest.model_validate(body).sampling_params()


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
    # every bad field is named, in OpenAI's error shape; nothing is silently coerced
    bad = {"messages": CHAT, "max_tokens": 0, "top_k": 2.7, "thinking_budget": "abc"}
    reply = httpx.post(f"{base_url}/v1/chat/completions", json=bad)
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["type"] == "invalid_request_error"
    for field in ("max_tokens", "top_k", "thinking_budget"):
        assert field in error["message"], error
    assert httpx.post(f"{base_url}/v1/chat/completions", content=b"{not json").status_code == 400


def test_prompt_longer_than_the_context_is_a_400_and_others_go_on(base_url: str, tiny_llm: LLM) -> None:
    huge = [{"role": "user", "content": "word " * (tiny_llm.cache.max_len + 10)}]
    reply = httpx.post(f"{base_url}/v1/chat/completions", json={"messages": huge}, timeout=60)
    assert reply.status_code == 400
    assert str(tiny_llm.cache.max_len) in reply.json()["error"]["message"]
    ok = {"messages": CHAT, "temperature": 0, "max_tokens": 3, "ignore_eos": True}
    assert httpx.post(f"{base_url}/v1/chat/completions", json=ok, timeout=60).status_code == 200


def test_a_disconnected_stream_frees_its_slot(base_url: str, tiny_llm: LLM) -> None:
    body = {"messages": CHAT, "temperature": 0, "max_tokens": 100_000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in received)
        assert tiny_llm.engine.scheduler.running  # still generating when the client leaves
    deadline = time.monotonic() + 30  # generous; the loop drops it at the next step after the disconnect
    while (
        tiny_llm.engine.scheduler.running
        or tiny_llm.cache_manager.num_free != tiny_llm.cache_manager.num_slots
    ):
        assert time.monotonic() < deadline, "the abandoned request kept its slot"
        time.sleep(0.02)


def test_a_client_that_leaves_a_non_streaming_request_frees_its_slot(base_url: str, tiny_llm: LLM) -> None:
    body = json.dumps(
        {"messages": CHAT, "temperature": 0, "max_tokens": 100_000, "ignore_eos": True}
    ).encode()
    host, port = base_url.removeprefix("http://").split(":")
    aborted = _aborted(tiny_llm)
    with socket.create_connection((host, int(port))) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 30
        while (
            not tiny_llm.engine.scheduler.running
        ):  # leave once the request is generating (an event, no clock)
            assert time.monotonic() < deadline, "the request never started"
            time.sleep(0.005)
    deadline = time.monotonic() + 30
    while (
        tiny_llm.engine.scheduler.running
        or tiny_llm.cache_manager.num_free != tiny_llm.cache_manager.num_slots
    ):
        assert time.monotonic() < deadline, "the abandoned request kept its slot"
        time.sleep(0.02)
    assert _aborted(tiny_llm) == aborted + 1


def _aborted(llm: LLM) -> float:
    return llm.engine.metrics.finished.labels("abort")._value.get()


def test_metrics_and_cached_tokens_of_a_second_turn(base_url: str) -> None:
    system = {"role": "system", "content": "You simulate a file system. " * 10}
    first = [system, {"role": "user", "content": "Action: ls /tmp"}]
    body = {"temperature": 0, "max_tokens": 4, "ignore_eos": True}
    httpx.post(f"{base_url}/v1/chat/completions", json={**body, "messages": first}, timeout=60)
    second = first + [
        {"role": "assistant", "content": "notes.txt"},
        {"role": "user", "content": "Action: cat /tmp/notes.txt"},
    ]
    usage = httpx.post(
        f"{base_url}/v1/chat/completions", json={**body, "messages": second}, timeout=60
    ).json()["usage"]
    assert 0 < usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]
    metrics = httpx.get(f"{base_url}/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    for name in (
        "aw_engine:num_requests_running",
        "aw_engine:prefix_cache_hits_total",
        "aw_engine:generation_tokens_total",
    ):
        assert name in metrics.text


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


def test_cli_serving_switches() -> None:
    args = build_parser().parse_args(
        ["serve", "--no-enable-prefix-caching", "--max-num-batched-tokens", "256"]
    )
    assert (args.enable_prefix_caching, args.max_num_batched_tokens) == (False, 256)
    assert build_parser().parse_args(["serve"]).enable_prefix_caching is True


def test_cli_reports_unloadable_model(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    (tmp_path / "config.json").write_text("{}")
    assert main(["serve", "--model", str(tmp_path)]) == 2
    assert "cannot load the model" in capsys.readouterr().err


def test_cli_bad_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--max-num-seqs", "many"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--help" in err and "usage:" not in err
