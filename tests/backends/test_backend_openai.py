"""The openai backend against the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import anyio
import httpx
import jsonschema
import pytest

from aw_mcp.backends.openai import (
    GRAMMAR,
    JSON_SCHEMA,
    UNCONSTRAINED,
    OpenAIWorldModel,
    dialect_of,
    vllm_dialect,
)
from aw_mcp.core.model_io import BackendError, Generation, GenerationParams
from aw_mcp.load.world import load_world_text
from aw_mcp.prompt.constraint import constraint_for
from aw_mcp.sim.simulator import Simulator
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


@pytest.mark.anyio
async def test_it_keeps_the_world_model_contract() -> None:
    # What a caller of any WorldModel relies on: a name for messages, preload() that loads nothing (and asks the
    # server nothing), generate() giving a Generation from the server's answer, aclose() releasing its own client.
    with ScriptedOpenAIServer([Reply(content="the observation", reasoning="thought")]) as server:
        backend = OpenAIWorldModel(server.base_url, "world-model", **FAST)
        assert backend.name == "openai"
        assert await backend.preload() is False
        assert server.requests == [] and server.probes == []
        generation = await backend.generate(MESSAGES, GenerationParams())
        assert isinstance(generation, Generation)
        assert (generation.text, generation.reasoning) == ("the observation", "thought")
        assert [r.path for r in server.requests] == ["/v1/chat/completions"]
        await backend.aclose()
    assert backend._client.is_closed


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
    # timeout_s bounds all attempts together (issue 15): a hung answer is not retried past the deadline (a retry
    # would get "on time" and pass). The bound: the 0.5 s deadline with a 10x margin, far below the 60 s answer.
    with ScriptedOpenAIServer([Reply(content="late", delay_s=60.0), Reply(content="on time")]) as server:
        started = time.monotonic()
        with pytest.raises(BackendError, match=r"no complete answer within timeout_s=0.5 s"):
            await generate(server, timeout_s=0.5)
        assert time.monotonic() - started < 10 * 0.5


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
    reply = Reply(content="x" * 1000, stream_chunks=1000, chunk_delay_s=0.1)  # ~100 s if left to finish
    with ScriptedOpenAIServer([reply]) as server:
        backend = OpenAIWorldModel(server.base_url, "m")
        progress: list[int] = []
        cancelled_at: list[float] = []

        with anyio.CancelScope() as scope:

            async def on_progress(tokens: int, message: str) -> None:
                progress.append(tokens)
                if tokens and not cancelled_at:  # streaming: cancel now (an event, not a clock)
                    cancelled_at.append(time.monotonic())
                    scope.cancel()

            await backend.generate(MESSAGES, GenerationParams(), on_progress=on_progress)
        stopped = time.monotonic() - cancelled_at[0]
        await backend.aclose()
    assert scope.cancelled_caught
    assert stopped < 5.0  # "promptly": within one 0.1 s chunk, asserted with a wide margin (not 100 s)
    assert progress and progress[-1] < 1000  # it was streaming when cancelled, and no "done" report followed
    assert len(server.requests) == 1  # cancellation is not a failure to retry


@pytest.mark.anyio
async def test_passed_in_client_is_not_closed() -> None:
    with ScriptedOpenAIServer([Reply(content="ok")]) as server:
        async with httpx.AsyncClient() as client:
            backend = OpenAIWorldModel(server.base_url, "m", http_client=client)
            await backend.generate(MESSAGES, GenerationParams())
            await backend.aclose()
            assert not client.is_closed


# --- constraints: the framed grammar in each server's dialect, then json_schema, then nothing ----------------------

TASK = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "status": {"enum": ["open", "closed"]}},
    "required": ["id", "status"],
}
CONSTRAINED_WORLD = f"""\
name: tasks
tools:
  - name: list_tasks
    description: The tasks of a project.
    inputSchema: {{type: object, properties: {{project: {{type: string}}}}, required: [project]}}
    outputSchema: {{type: object, properties: {{items: {{type: array, items: {json.dumps(TASK)}}}}}, required: [items]}}
    outputWrapper: items
  - name: get_task
    description: One task.
    inputSchema: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
    outputSchema: {json.dumps(TASK)}
"""
TASKS = [{"id": "t1", "status": "open"}]
MARKER = "**Environment Observation:**\n"
FRAMED = MARKER + json.dumps(TASKS, indent=2)  # as the engine writes it: the trained frame, the JSON indented


def constrained(tool: str = "list_tasks") -> GenerationParams:
    world = load_world_text(CONSTRAINED_WORLD, "tasks.yaml")
    return GenerationParams(constraint=constraint_for(world.tool(tool), "mcp"))


def form_of(body: dict[str, Any]) -> str:
    """Which form of constraint a request carried."""
    if {"structured_outputs", "guided_grammar", "ebnf", "grammar"} & set(body):
        return GRAMMAR
    return JSON_SCHEMA if "response_format" in body else UNCONSTRAINED


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("card", "version", "field"),
    [
        ({"owned_by": "vllm"}, "0.11.1", ("structured_outputs", "grammar")),
        ({"owned_by": "vllm"}, None, ("structured_outputs", "grammar")),  # no /version: current vLLM
        ({"owned_by": "vllm"}, "0.9.2", ("guided_grammar",)),
        ({"owned_by": "sglang"}, None, ("ebnf",)),
        ({"owned_by": "llamacpp"}, None, ("grammar",)),
        ({"owned_by": "me", "permissions": []}, None, ("grammar",)),  # llama-cpp-python
    ],
    ids=["vllm", "vllm-without-version", "vllm-0.9", "sglang", "llama-server", "llama-cpp-python"],
)
async def test_a_grammar_server_gets_the_framed_grammar_and_the_answer_keeps_the_marker(
    card: dict[str, Any], version: str | None, field: tuple[str, ...]
) -> None:
    with ScriptedOpenAIServer([Reply(content=FRAMED)], model_card=card, version=version) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0)
        answers = [await backend.generate(MESSAGES, constrained()) for _ in range(2)]
        await backend.aclose()
    for answer in answers:
        assert answer.text == FRAMED and answer.text.startswith(MARKER)
        assert answer.extra["constrained_as"] == GRAMMAR
    body = server.requests[0].body
    assert "response_format" not in body
    grammar = body
    for key in field:
        grammar = grammar[key]
    assert grammar.startswith('root ::= "**Environment Observation:**\\n" ')
    assert backend.constraint_support == {GRAMMAR: True, JSON_SCHEMA: None}
    # Identified once: the listing, and for vLLM its version.
    assert server.probes == ["/v1/models"] + (["/version"] if card["owned_by"] == "vllm" else [])


@pytest.mark.anyio
@pytest.mark.parametrize(
    "card",
    [{"owned_by": "tests"}, {"owned_by": "openai"}, {"owned_by": "engine"}, {"owned_by": "me"}],
    ids=["unknown", "openai", "our-engine", "me-without-permissions"],
)
async def test_a_server_not_known_to_take_a_grammar_is_not_constrained_and_the_frame_stays(
    card: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # vLLM ignores fields it does not know (HTTP 200, unconstrained), and so may any server: a grammar goes only to
    # a server known to read it. The JSON Schema alone would make the answer bare JSON, never the trained frame
    # (issue 31.6): an unknown server gets no constraint, and the answer is validated afterwards.
    with ScriptedOpenAIServer([Reply(content=FRAMED)], model_card=card) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0)
        with caplog.at_level(logging.INFO, logger="aw_mcp.backends.openai"):
            answers = [await backend.generate(MESSAGES, constrained()) for _ in range(2)]
        await backend.aclose()
    assert [form_of(r.body) for r in server.requests] == [UNCONSTRAINED, UNCONSTRAINED]
    assert all(a.text.startswith(MARKER) and a.extra["constrained_as"] == UNCONSTRAINED for a in answers)
    [line] = [r.getMessage() for r in caplog.records if "not known to take a grammar" in r.getMessage()]
    assert "validated afterwards" in line


@pytest.mark.anyio
async def test_a_named_dialect_is_not_identified() -> None:
    with ScriptedOpenAIServer([Reply(content=FRAMED)]) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0, dialect="sglang")
        await backend.generate(MESSAGES, constrained())
        await backend.aclose()
    assert server.probes == [] and "ebnf" in server.requests[0].body
    with pytest.raises(ValueError, match="unknown dialect"):
        OpenAIWorldModel(server.base_url, "m", dialect="tgi")


@pytest.mark.anyio
async def test_a_server_that_refuses_the_grammar_gets_json_schema_and_remembers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusal = Reply(status=400, body='{"error": {"message": "structured_outputs: invalid grammar"}}')
    with ScriptedOpenAIServer(
        [Reply(content=json.dumps(TASKS))],
        model_card={"owned_by": "vllm"},
        version="0.11.0",
        refuse={"structured_outputs": refusal},
    ) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0)
        with caplog.at_level(logging.WARNING, logger="aw_mcp.backends.openai"):
            answers = [
                await backend.generate(MESSAGES, constrained(tool)) for tool in ("list_tasks", "get_task")
            ]
        await backend.aclose()
    assert [form_of(r.body) for r in server.requests] == [GRAMMAR, JSON_SCHEMA, JSON_SCHEMA]
    assert [a.extra["constrained_as"] for a in answers] == [JSON_SCHEMA, JSON_SCHEMA]
    assert backend.constraint_support == {GRAMMAR: False, JSON_SCHEMA: True}
    [warning] = [r.getMessage() for r in caplog.records]
    assert "does not accept structured_outputs.grammar" in warning and "invalid grammar" in warning


@pytest.mark.anyio
async def test_a_server_that_refuses_both_gets_no_constraint(caplog: pytest.LogCaptureFixture) -> None:
    with ScriptedOpenAIServer(
        [Reply(content=FRAMED)],
        model_card={"owned_by": "sglang"},
        refuse={
            "ebnf": Reply(status=400, body='{"message": "EBNF grammars are not supported by this backend"}'),
            "response_format": Reply(status=422, body='{"detail": "response_format: unsupported"}'),
        },
    ) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0)
        with caplog.at_level(logging.WARNING, logger="aw_mcp.backends.openai"):
            answers = [await backend.generate(MESSAGES, constrained()) for _ in range(2)]
        await backend.aclose()
    assert [form_of(r.body) for r in server.requests] == [GRAMMAR, JSON_SCHEMA, UNCONSTRAINED, UNCONSTRAINED]
    assert all(a.text == FRAMED and a.extra["constrained_as"] == UNCONSTRAINED for a in answers)
    assert backend.constraint_support == {GRAMMAR: False, JSON_SCHEMA: False}
    assert len(caplog.records) == 2  # one warning per refused form, not per call


@pytest.mark.anyio
async def test_a_grammar_refused_inside_the_stream_is_a_refusal_not_retried() -> None:
    # SGLang aborts a request whose grammar it cannot compile after the 200 header, with an error chunk.
    abort = {
        "object": "error",
        "message": "Invalid grammar request: ebnf parse error",
        "type": "BAD_REQUEST",
        "code": 400,
    }

    def script(body: dict[str, Any], n: int) -> Reply:
        return Reply(error_chunk=abort) if "ebnf" in body else Reply(content=json.dumps(TASKS))

    with ScriptedOpenAIServer(script, model_card={"owned_by": "sglang"}) as server:
        backend = OpenAIWorldModel(server.base_url, "m", **FAST)
        answers = [await backend.generate(MESSAGES, constrained()) for _ in range(2)]
        await backend.aclose()
    assert [form_of(r.body) for r in server.requests] == [GRAMMAR, JSON_SCHEMA, JSON_SCHEMA]
    assert [a.extra["attempts"] for a in answers] == [1, 1]
    assert backend.constraint_support == {GRAMMAR: False, JSON_SCHEMA: True}


@pytest.mark.anyio
async def test_an_error_in_the_stream_that_names_no_constraint_is_still_retried() -> None:
    with ScriptedOpenAIServer(
        [Reply(error_chunk={"message": "CUDA out of memory", "code": 500}), Reply(content=FRAMED)],
        model_card={"owned_by": "sglang"},
    ) as server:
        answer = await generate(server, constrained())
    assert [form_of(r.body) for r in server.requests] == [GRAMMAR, GRAMMAR]
    assert answer.extra == {"attempts": 2, "constrained_as": GRAMMAR}


@pytest.mark.anyio
async def test_a_500_naming_response_format_is_a_refusal_not_retried() -> None:
    # llama-cpp-python 0.3.36's answer to response_format json_schema: HTTP 500 with the validation error.
    body = (
        "{\"error\": {\"message\": \"[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        "'msg': \\\"Input should be 'text' or 'json_object'\\\", 'input': 'json_schema'}]\", "
        '"type": "internal_server_error"}}'
    )
    grammar_refused = Reply(status=400, body='{"error": {"message": "structured_outputs: invalid grammar"}}')
    with ScriptedOpenAIServer(
        [Reply(content=json.dumps(TASKS))],
        model_card={"owned_by": "vllm"},
        version="0.11.0",
        refuse={"structured_outputs": grammar_refused, "response_format": Reply(status=500, body=body)},
    ) as server:
        backend = OpenAIWorldModel(server.base_url, "m", **FAST)  # retries=3: a 5xx would be tried 4 times
        answers = [await backend.generate(MESSAGES, constrained()) for _ in range(2)]
        await backend.aclose()
    assert [form_of(r.body) for r in server.requests] == [GRAMMAR, JSON_SCHEMA, UNCONSTRAINED, UNCONSTRAINED]
    assert [a.extra["attempts"] for a in answers] == [1, 1]
    assert backend.response_format_supported is False


@pytest.mark.anyio
async def test_a_500_that_names_no_constraint_is_still_retried() -> None:
    with ScriptedOpenAIServer(
        [Reply(status=500, body='{"error": "CUDA error: out of memory"}'), Reply(content=FRAMED)],
        model_card={"owned_by": "sglang"},
    ) as server:
        answer = await generate(server, constrained())
    assert [form_of(r.body) for r in server.requests] == [GRAMMAR, GRAMMAR]
    assert answer.extra["attempts"] == 2


@pytest.mark.anyio
async def test_llama_cpp_python_gets_its_json_object_form() -> None:
    refusal = Reply(status=500, body='{"error": {"message": "error parsing grammar"}}')
    with ScriptedOpenAIServer(
        [Reply(content=json.dumps(TASKS))],
        model_card={"owned_by": "me", "permissions": []},
        refuse={"grammar": refusal},
    ) as server:
        backend = OpenAIWorldModel(server.base_url, "m", **FAST)
        await backend.generate(MESSAGES, constrained())
        await backend.aclose()
    grammar_request, json_request = (r.body for r in server.requests)
    assert form_of(grammar_request) == GRAMMAR
    schema = constrained().constraint.json_schema  # type: ignore[union-attr]
    assert json_request["response_format"] == {"type": "json_object", "schema": schema}


@pytest.mark.anyio
async def test_after_the_grammar_worked_a_refused_tool_falls_back_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def script(body: dict[str, Any], n: int) -> Reply:
        if "ebnf" in body and '"[\\n' not in body["ebnf"]:  # get_task's grammar (no array in it)
            return Reply(status=400, body='{"message": "ebnf: grammar too large"}')
        return Reply(content=FRAMED)

    with ScriptedOpenAIServer(script, model_card={"owned_by": "sglang"}) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0)
        with caplog.at_level(logging.WARNING, logger="aw_mcp.backends.openai"):
            for tool in ("list_tasks", "get_task", "get_task", "list_tasks"):
                await backend.generate(MESSAGES, constrained(tool))
        await backend.aclose()
    assert [form_of(r.body) for r in server.requests] == [GRAMMAR, GRAMMAR, JSON_SCHEMA, JSON_SCHEMA, GRAMMAR]
    assert backend.constraint_support == {GRAMMAR: True, JSON_SCHEMA: True}
    [warning] = [r.getMessage() for r in caplog.records]
    assert "get_task" in warning and "as ebnf" in warning


@pytest.mark.anyio
async def test_the_simulator_reads_an_answer_framed_by_the_server_grammar() -> None:
    world = load_world_text(CONSTRAINED_WORLD, "tasks.yaml")
    with ScriptedOpenAIServer([Reply(content=FRAMED)], model_card={"owned_by": "sglang"}) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0)
        outcome = await Simulator(world, backend).call("list_tasks", {"project": "web"})
        await backend.aclose()
    assert not outcome.is_error and outcome.structured == {"items": TASKS}
    assert form_of(server.requests[0].body) == GRAMMAR


def test_the_server_is_told_apart_by_its_model_listing() -> None:
    def listing(*cards: dict[str, Any]) -> dict[str, Any]:
        return {"object": "list", "data": list(cards)}

    assert dialect_of(listing({"id": "m", "owned_by": "vllm"}), "m") == "vllm"
    assert dialect_of(listing({"id": "m", "owned_by": "sglang"}), "other") == "sglang"  # the only owner
    assert dialect_of(listing({"id": "m", "owned_by": "llamacpp"}), "m") == "llama.cpp"
    assert dialect_of(listing({"id": "m", "owned_by": "me", "permissions": []}), "m") == "llama-cpp-python"
    # A proxy listing several servers' models: the entry of our model decides, else nobody.
    mixed = listing({"id": "a", "owned_by": "vllm"}, {"id": "b", "owned_by": "sglang"})
    assert (dialect_of(mixed, "b"), dialect_of(mixed, "c")) == ("sglang", None)
    for unknown in (None, [], {"data": None}, listing({"id": "m", "owned_by": "openai"}), "<html>"):
        assert dialect_of(unknown, "m") is None
    assert [
        vllm_dialect(v) for v in ({"version": "0.12.0"}, {"version": "0.10.2rc1"}, {"version": "0.10.1.1"})
    ] == [
        "vllm",
        "vllm",
        "vllm-guided",
    ]
    assert [vllm_dialect(v) for v in ({"version": "0.7.3"}, {"version": "dev"}, None)] == [
        "openai",
        "vllm",
        "vllm",
    ]


# --- the grammar text: the engine's answer, in a syntax xgrammar (vLLM, SGLang) and llama.cpp both read -------------

RICH = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "when": {"type": "string", "format": "date-time"},
        "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "meta": {"type": "object"},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
        "note": {"type": ["string", "null"]},
        "kind": {"const": {"a": [1, 2]}},
        "child": {"$ref": "#/$defs/child"},
    },
    "required": ["name", "age"],
    "$defs": {"child": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
}
RICH_ANSWERS = {  # (answer after the frame, valid) - the engine's layout: members indented, free-form values compact
    "minimal": ('{\n  "name": "Ada",\n  "age": 36\n}', True),
    "all": (
        '{\n  "name": "Ada",\n  "age": 120,\n  "when": "2026-03-01T09:00:00Z",\n  "code": "ABC-12",\n'
        '  "tags": [\n    "x",\n    "y"\n  ],\n  "meta": {"k": [1, {"z": null}]},\n  "scores": {\n'
        '    "a": -1.5e3\n  },\n  "note": "say \\"hi\\"\\n",\n  "kind": {"a":[1,2]},\n  "child": {\n    "id": 7\n  }\n}',
        True,
    ),
    "error body": ('{\n  "error": {\n    "status": 404,\n    "message": "no such task"\n  }\n}', True),
    "error text": ("Error: 404 no such task", True),
    "compact": ('{"name": "Ada", "age": 36}', False),
    "age out of range": ('{\n  "name": "Ada",\n  "age": 121\n}', False),
    "empty name": ('{\n  "name": "",\n  "age": 1\n}', False),
    "missing age": ('{\n  "name": "Ada"\n}', False),
    "extra member": ('{\n  "name": "Ada",\n  "age": 1,\n  "x": 1\n}', False),
    "bad date": ('{\n  "name": "A",\n  "age": 1,\n  "when": "2026-13-01T09:00:00Z"\n}', False),
    "bad code": ('{\n  "name": "A",\n  "age": 1,\n  "code": "AB-12"\n}', False),
    "three tags": ('{\n  "name": "A",\n  "age": 1,\n  "tags": [\n    "x",\n    "y",\n    "z"\n  ]\n}', False),
    "indented free-form": ('{\n  "name": "A",\n  "age": 1,\n  "meta": {\n    "k": 1\n  }\n}', False),
    "error status": ('{\n  "error": {\n    "status": 99,\n    "message": "x"\n  }\n}', False),
    "two-line error text": ("Error: a\nb", False),
}


def rich_constraint(domain: str = "mcp") -> Any:
    from aw_mcp.core.model_io import AnswerConstraint
    from aw_mcp.prompt.constraint import answer_frame, answer_schema, error_text_regex, tool_grammar

    prefix, suffix = answer_frame(domain)
    schema = answer_schema(tool_grammar(RICH, None).schema["anyOf"][0])
    schema["$defs"] = RICH["$defs"]
    return AnswerConstraint("rich", schema, prefix=prefix, suffix=suffix, text_alternative=error_text_regex())


@pytest.mark.parametrize("domain", ["mcp", "web"])
def test_the_framed_grammar_accepts_what_the_engines_grammar_accepts(domain: str) -> None:
    xgrammar = pytest.importorskip("xgrammar")
    pytest.importorskip("torch")
    from xgrammar.testing import _is_grammar_accept_string as accepts

    from aw_mcp.backends.local import answer_format
    from aw_mcp.prompt.constraint import ANSWER_INDENT
    from aw_mcp.prompt.grammar_text import framed_grammar
    from engine.structured import answer_grammar

    constraint = rich_constraint(domain)
    ours = xgrammar.Grammar.from_ebnf(framed_grammar(constraint, ANSWER_INDENT).text)
    engines = answer_grammar(answer_format(constraint))
    for name, (answer, valid) in RICH_ANSWERS.items():
        text = constraint.prefix + answer + constraint.suffix
        assert (accepts(ours, text), accepts(engines, text)) == (valid, valid), name
    assert not accepts(ours, RICH_ANSWERS["minimal"][0])  # the frame is required


def test_the_grammar_text_keeps_to_what_both_dialects_read() -> None:
    from aw_mcp.prompt.grammar_text import MAX_GRAMMAR_REPETITION, framed_grammar

    text = framed_grammar(rich_constraint(), 2).text
    rules = dict(line.split(" ::= ", 1) for line in text.splitlines())
    assert "root" in rules and all(
        re.fullmatch(r"[a-z][a-z0-9-]*", name) for name in rules
    )  # llama.cpp: no "_"
    bodies = " ".join(rules.values())
    outside_literals = re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', " ", bodies)
    assert set(re.findall(r"[a-z][a-z0-9-]*", outside_literals)) <= set(
        rules
    )  # every rule it uses is defined
    assert "\\x" not in text  # xgrammar reads all the hex digits after \x, llama.cpp two
    bounds = [int(n) for n in re.findall(r"\{(\d+)(?:,\d*)?\}", outside_literals)]
    assert bounds and max(bounds) <= MAX_GRAMMAR_REPETITION


@pytest.mark.parametrize(
    ("bounds", "window"),
    [
        ({"minimum": 0, "maximum": 120}, range(-5, 1100)),
        ({"minimum": -40, "maximum": 55}, range(-500, 500)),
        ({"minimum": 7}, range(-20, 2000)),
        ({"maximum": -3}, range(-1200, 20)),
        ({"exclusiveMinimum": 95, "exclusiveMaximum": 1005}, range(0, 1500)),
        ({"minimum": -1000, "maximum": -10}, range(-1500, 10)),
        ({"minimum": 2.5, "maximum": 9.99}, range(-5, 20)),
    ],
)
def test_integer_bounds_are_exact(bounds: dict[str, float], window: range) -> None:
    xgrammar = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string as accepts

    from aw_mcp.core.model_io import AnswerConstraint
    from aw_mcp.prompt.grammar_text import framed_grammar

    grammar = framed_grammar(AnswerConstraint("n", {"type": "integer", **bounds}), 2)
    assert grammar.loosened == ()
    compiled = xgrammar.Grammar.from_ebnf(grammar.text)
    validator = jsonschema.Draft202012Validator({"type": "integer", **bounds})
    wrong = [n for n in window if accepts(compiled, str(n)) != validator.is_valid(n)]
    assert not wrong
    assert not accepts(compiled, "007") and not accepts(compiled, "-0")


@pytest.mark.parametrize(
    ("pattern", "matching", "other"),
    [
        ("^[A-Z]{3}-\\d+$", ["ABC-1", "XYZ-2026"], ["AB-1", "ABC-", "xABC-1", "ABC-1x"]),
        ("^ab", ["ab", "abzz"], ["zab", "a"]),  # anchored at the start only: anything may follow
        ("b\\.c$", ["b.c", "zzb.c"], ["bxc", "b.cz"]),
        ("x", ["x", "axb"], ["", "ab"]),  # unanchored: a match anywhere
        ('^say "hi"\\\\$', ['say "hi"\\'], ["say hi"]),  # quotes and backslashes, escaped as JSON writes them
        ("^(?:ab|cd)+$", ["ab", "abcdab"], ["", "ac"]),
        ("^[^,]{1,3}$", ["a", "a b", 'a"b'], ["", "a,b", "abcd"]),
    ],
)
def test_patterns_keep_json_schemas_meaning(pattern: str, matching: list[str], other: list[str]) -> None:
    xgrammar = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string as accepts

    from aw_mcp.core.model_io import AnswerConstraint
    from aw_mcp.prompt.grammar_text import framed_grammar

    grammar = framed_grammar(AnswerConstraint("p", {"type": "string", "pattern": pattern}), 2)
    assert grammar.loosened == ()
    compiled = xgrammar.Grammar.from_ebnf(grammar.text)
    for value in matching:
        assert re.search(pattern, value) and accepts(compiled, json.dumps(value, ensure_ascii=False)), value
    for value in other:
        assert not re.search(pattern, value) and not accepts(compiled, json.dumps(value)), value


def test_what_the_grammar_cannot_enforce_is_named_and_left_to_validation() -> None:
    from aw_mcp.core.model_io import AnswerConstraint
    from aw_mcp.prompt.grammar_text import NotExpressible, framed_grammar

    schema = {
        "type": "object",
        "properties": {
            "word": {"type": "string", "pattern": "^(?=a)\\w+$"},  # lookahead
            "mail": {"type": "string", "format": "email"},
            "price": {"type": "number", "minimum": 0, "maximum": 10},
        },
    }
    loosened = framed_grammar(AnswerConstraint("t", schema), 2).loosened
    assert [line.split(" at ")[0] for line in loosened] == ["`pattern`", "`format`", "`maximum`"]
    assert "/properties/word" in loosened[0]
    with pytest.raises(NotExpressible, match="unknown type 'date'"):
        framed_grammar(AnswerConstraint("t", {"type": "date"}), 2)


@pytest.mark.anyio
async def test_a_schema_the_grammar_cannot_write_is_sent_as_json_schema() -> None:
    from aw_mcp.core.model_io import AnswerConstraint

    odd = GenerationParams(constraint=AnswerConstraint("odd", {"type": "date"}, prefix=MARKER))
    with ScriptedOpenAIServer([Reply(content="{}")], model_card={"owned_by": "sglang"}) as server:
        backend = OpenAIWorldModel(server.base_url, "m", retries=0)
        await backend.generate(MESSAGES, odd)
        await backend.generate(MESSAGES, constrained())
        await backend.aclose()
    assert [form_of(r.body) for r in server.requests] == [JSON_SCHEMA, GRAMMAR]
