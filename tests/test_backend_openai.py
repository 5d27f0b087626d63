"""The openai backend against the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import pytest

from aw_mcp.backends.base import BackendError, GenerationParams, WorldModel
from aw_mcp.backends.openai import OpenAIWorldModel
from tests.fake_openai import Reply, ScriptedOpenAIServer

MESSAGES = [
    {"role": "system", "content": "You simulate the CRM world."},
    {"role": "user", "content": '### Turn 1\n**Action:**\n```json\n{"name": "find", "arguments": {}}\n```'},
]
FAST = {"backoff_s": 0.001}  # retries must not slow the suite down


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def no_ambient_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AW_API_KEY", raising=False)


async def generate(server: ScriptedOpenAIServer, params: GenerationParams | None = None, **kwargs: Any):
    backend = OpenAIWorldModel(server.base_url, "world-model", **{**FAST, **kwargs})
    try:
        return await backend.generate(MESSAGES, params or GenerationParams())
    finally:
        await backend.aclose()


def test_satisfies_protocol() -> None:
    assert isinstance(OpenAIWorldModel("http://127.0.0.1:1/v1", "m"), WorldModel)


@pytest.mark.anyio
async def test_request_shape_and_auth_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AW_API_KEY", "sk-test-123")
    params = GenerationParams(
        temperature=0.3, top_p=0.9, top_k=7, max_tokens=99, thinking=False, seed=5, stop=("X",)
    )
    with ScriptedOpenAIServer([Reply(content="ok")]) as server:
        await generate(server, params)
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test-123"
    body = request.body
    assert body["model"] == "world-model"
    assert body["messages"] == MESSAGES
    assert (body["temperature"], body["top_p"], body["top_k"], body["max_tokens"]) == (0.3, 0.9, 7, 99)
    assert (body["seed"], body["stop"], body["stream"]) == (5, ["X"], True)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.anyio
async def test_defaults_omit_seed_stop_and_auth() -> None:
    with ScriptedOpenAIServer([Reply(content="ok")]) as server:
        await generate(server)
    body, headers = server.requests[0].body, server.requests[0].headers
    assert "seed" not in body and "stop" not in body
    assert "authorization" not in headers
    # The official evaluation's request: thinking left to the chat template's default, no top_p / top_k.
    assert "chat_template_kwargs" not in body and "top_p" not in body and "top_k" not in body
    assert (body["temperature"], body["max_tokens"]) == (0.6, 32768)


@pytest.mark.anyio
@pytest.mark.parametrize("suffix", ["/", ""])
async def test_base_url_with_or_without_trailing_slash(suffix: str) -> None:
    with ScriptedOpenAIServer([Reply(content="ok")]) as server:
        backend = OpenAIWorldModel(server.base_url + suffix, "m")
        assert (await backend.generate(MESSAGES, GenerationParams())).text == "ok"
        await backend.aclose()
    assert server.requests[0].path == "/v1/chat/completions"


@pytest.mark.anyio
async def test_base_url_without_v1_posts_under_it() -> None:
    with ScriptedOpenAIServer([Reply(content="ok")]) as server:
        backend = OpenAIWorldModel(server.base_url.removesuffix("/v1"), "m")
        assert (await backend.generate(MESSAGES, GenerationParams())).text == "ok"
        await backend.aclose()
    assert server.requests[0].path == "/chat/completions"


@pytest.mark.anyio
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_streaming_splits_reasoning_from_content(field: str) -> None:
    reply = Reply(
        content="**Environment Observation:** 3 contacts found",
        reasoning="The CRM holds three contacts named Ada.",
        reasoning_field=field,
        stream_chunks=5,
    )
    with ScriptedOpenAIServer([reply]) as server:
        generation = await generate(server)
    assert generation.text == reply.content
    assert generation.reasoning == reply.reasoning
    assert generation.finish_reason == "stop"
    assert generation.completion_tokens == len(reply.content.split()) + len(reply.reasoning.split())
    assert generation.prompt_tokens is not None and generation.prompt_tokens > 0
    assert generation.extra["attempts"] == 1


@pytest.mark.anyio
async def test_non_streaming_answer_is_accepted() -> None:
    reply = Reply(content="observation text", reasoning="thought", ignore_stream=True, finish_reason="length")
    with ScriptedOpenAIServer([reply]) as server:
        generation = await generate(server)
    assert (generation.text, generation.reasoning, generation.finish_reason) == (
        "observation text",
        "thought",
        "length",
    )
    assert server.requests[0].body["stream"] is True  # we asked; the server chose not to


@pytest.mark.anyio
async def test_progress_reports_increase_and_end_with_the_total() -> None:
    reply = Reply(
        content="x" * 40, reasoning="y" * 40, stream_chunks=10, chunk_delay_s=0.03, send_usage=False
    )
    reports: list[tuple[int, str]] = []

    async def on_progress(tokens: int, message: str) -> None:
        reports.append((tokens, message))

    with ScriptedOpenAIServer([reply]) as server:
        backend = OpenAIWorldModel(server.base_url, "m")
        generation = await backend.generate(MESSAGES, GenerationParams(), on_progress=on_progress)
        await backend.aclose()
    assert generation.completion_tokens is None  # no usage sent: counted one token per chunk
    counts = [tokens for tokens, _ in reports]
    assert len(reports) >= 2, reports  # ~0.6 s of streaming with a report every 0.25 s, plus the final one
    assert len(reports) <= 5, reports  # throttled: not one per chunk
    assert counts == sorted(counts) and counts[0] < counts[-1]
    assert reports[-1] == (20, "done")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "failure",
    [
        Reply(status=503, body="overloaded"),
        Reply(status=500, body="boom"),
        Reply(status=429, body="slow down"),
        Reply(break_connection=True),
    ],
    ids=["503", "500", "429", "dropped-connection"],
)
async def test_retries_transient_failures_then_succeeds(failure: Reply) -> None:
    with ScriptedOpenAIServer([failure, failure, Reply(content="finally")]) as server:
        generation = await generate(server)
    assert generation.text == "finally"
    assert generation.extra["attempts"] == 3
    assert len(server.requests) == 3


@pytest.mark.anyio
async def test_429_honours_retry_after() -> None:
    with ScriptedOpenAIServer(
        [Reply(status=429, headers={"Retry-After": "0.4"}), Reply(content="ok")]
    ) as server:
        start = time.monotonic()
        generation = await generate(server)
        elapsed = time.monotonic() - start
    assert generation.text == "ok"
    assert elapsed >= 0.4


@pytest.mark.anyio
async def test_gives_up_with_url_status_and_body_excerpt() -> None:
    long_body = "GPU out of memory; " + "z" * 2000
    with ScriptedOpenAIServer([Reply(status=503, body=long_body)]) as server:
        with pytest.raises(BackendError) as caught:
            await generate(server, retries=2)
    message = str(caught.value)
    assert f"{server.base_url}/chat/completions" in message
    assert "HTTP 503" in message and "GPU out of memory" in message
    assert "3 attempt" in message
    assert "z" * 501 not in message  # the excerpt is bounded
    assert len(server.requests) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("status", [400, 401, 404])
async def test_client_errors_are_not_retried(status: int) -> None:
    with ScriptedOpenAIServer([Reply(status=status, body='{"error": "model not served here"}')]) as server:
        with pytest.raises(BackendError) as caught:
            await generate(server)
    assert len(server.requests) == 1
    message = str(caught.value)
    assert f"HTTP {status}" in message and "model not served here" in message and server.base_url in message


@pytest.mark.anyio
async def test_connection_refused_gives_up_naming_the_url() -> None:
    with ScriptedOpenAIServer([Reply(content="unused")]) as server:
        url = server.base_url
    # The server is gone: every attempt is refused.
    with pytest.raises(BackendError) as caught:
        backend = OpenAIWorldModel(url, "m", retries=1, backoff_s=0.001)
        try:
            await backend.generate(MESSAGES, GenerationParams())
        finally:
            await backend.aclose()
    assert url in str(caught.value) and "ConnectError" in str(caught.value)


@pytest.mark.anyio
async def test_timeout_is_a_deadline_for_the_whole_call_not_one_attempt() -> None:
    # timeout_s bounds all attempts together (issue 15): a hung answer is not retried past the deadline.
    with ScriptedOpenAIServer([Reply(content="late", delay_s=5.0), Reply(content="on time")]) as server:
        started = time.monotonic()
        with pytest.raises(BackendError, match=r"no complete answer within timeout_s=0.2 s"):
            await generate(server, timeout_s=0.2)
        assert time.monotonic() - started < 4.0  # did not wait for the 5 s answer


@pytest.mark.anyio
async def test_stream_ending_early_is_retried() -> None:
    # A cleanly closed stream without finish_reason or [DONE]: a partial answer must not pass for a whole one.
    with ScriptedOpenAIServer(
        [Reply(content="partial answer", end_after_chunks=2), Reply(content="whole")]
    ) as server:
        generation = await generate(server)
    assert generation.text == "whole" and generation.extra["attempts"] == 2


@pytest.mark.anyio
async def test_cancellation_mid_stream_stops_promptly() -> None:
    reply = Reply(content="x" * 100, stream_chunks=100, chunk_delay_s=0.1)  # ~10 s if left to finish
    with ScriptedOpenAIServer([reply]) as server:
        backend = OpenAIWorldModel(server.base_url, "m")
        progress: list[int] = []

        async def on_progress(tokens: int, message: str) -> None:
            progress.append(tokens)

        start = time.monotonic()
        with anyio.move_on_after(0.6) as scope:
            await backend.generate(MESSAGES, GenerationParams(), on_progress=on_progress)
        elapsed = time.monotonic() - start
        await backend.aclose()
    assert scope.cancelled_caught
    assert elapsed < 1.5
    assert progress and progress[-1] < 100  # it was streaming when cancelled, and no "done" report followed
    assert len(server.requests) == 1  # cancellation is not a failure to retry


@pytest.mark.anyio
async def test_passed_in_client_is_not_closed() -> None:
    with ScriptedOpenAIServer([Reply(content="ok")]) as server:
        async with httpx.AsyncClient() as client:
            backend = OpenAIWorldModel(server.base_url, "m", http_client=client)
            await backend.generate(MESSAGES, GenerationParams())
            await backend.aclose()
            assert not client.is_closed
