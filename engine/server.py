"""OpenAI-compatible HTTP server over the engine: /v1/chat/completions (streaming or not), /v1/models, /health,
and Prometheus /metrics.

Every request is a sequence in the engine's step loop, so concurrent clients are batched together; deltas reach
the event loop through `LLM.generate_async` (no thread per request). A client that disconnects cancels its request,
which leaves the batch at the next step. Request bodies are checked by pydantic: a 400 in OpenAI's error shape
lists every bad field. Thinking is split into `reasoning_content` the way vLLM's qwen3 reasoning parser does it:
text before `</think>` is reasoning. Sampling fields a request leaves unset take the checkpoint's recommended values
(generation_config.json), as vLLM's server does; /v1/models shows them.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.generation_config import SamplingDefaults
from engine.llm import LLM, PromptTooLong
from engine.reasoning import ReasoningStreamSplitter, split_reasoning
from engine.sampling import SamplingParams
from engine.sequence import StreamDelta
from engine.structured import StructuredOutputError

DEFAULT_MAX_TOKENS = 4096


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "text"
    text: str = ""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, ... are accepted and not used
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # OpenAI content parts: keep the text ones
            return "".join(part.text for part in self.content if part.type == "text")
        return self.content or ""


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`: a JSON Schema (or any JSON object) the answer must follow, enforced by the
    engine's grammar after the thinking (engine/structured.py)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _needs_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError('type "json_schema" needs a "json_schema": {"name": ..., "schema": {...}}')
        return self

    def schema_or_none(self) -> dict[str, Any] | None:
        if self.type == "json_schema" and self.json_schema is not None:
            return self.json_schema.json_schema
        if self.type == "json_object":
            return {"type": "object"}
        return None


class ChatCompletionRequest(BaseModel):
    """The fields we honour; other OpenAI fields are accepted and ignored, as vLLM does."""

    model_config = ConfigDict(extra="allow")
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=100)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)  # vLLM's extra sampling fields
    repetition_penalty: float | None = Field(None, gt=0, le=100)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    thinking_budget: int | None = Field(None, ge=0)
    n: int = Field(1, ge=1, le=1)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    response_format: ResponseFormat | None = None

    @model_validator(mode="after")
    def _stop_strings(self) -> ChatCompletionRequest:
        if isinstance(self.stop, list) and len(self.stop) > 16:
            raise ValueError("at most 16 stop strings")
        return self

    @property
    def thinking(self) -> bool:
        return bool(self.chat_template_kwargs.get("enable_thinking", True))

    def sampling_params(self, defaults: SamplingDefaults | None = None) -> SamplingParams:
        """The request's settings; each sampling field it leaves unset from `defaults` (the checkpoint's
        recommended values), else neutral, and its token limit capped by theirs: vLLM's `to_sampling_params`."""
        defaults = defaults or SamplingDefaults()
        return SamplingParams(
            **defaults.apply(
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=self.top_k,
                min_p=self.min_p,
                repetition_penalty=self.repetition_penalty,
            ),
            max_tokens=defaults.max_tokens(self.max_tokens or self.max_completion_tokens, DEFAULT_MAX_TOKENS),
            seed=self.seed,
            stop=[self.stop] if isinstance(self.stop, str) else self.stop,
            ignore_eos=self.ignore_eos,
            thinking_budget=self.thinking_budget,
            json_schema=self.response_format.schema_or_none() if self.response_format else None,
        )


def _validation_message(exc: ValidationError) -> tuple[str, str | None]:
    problems, first = [], None
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "body"
        first = first or where
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems), first


def build_app(llm: LLM, served_model_name: str | None = None) -> Starlette:
    model_name = served_model_name or llm.model_name
    created = int(time.time())
    llm.engine.metrics.record_memory_plan(llm.memory_plan().as_dict())

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(_: Request) -> Response:
        return Response(llm.engine.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def models(_: Request) -> Response:
        card = {
            "id": model_name,
            "object": "model",
            "created": created,
            "owned_by": "engine",
            "max_model_len": llm.options.max_model_len,
            # what a request that sets no sampling fields gets (our addition to vLLM's card)
            "default_sampling_params": llm.sampling_defaults.as_dict(),
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def chat_completions(request: Request) -> Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(400, f"the body is not JSON: {exc}")
        try:
            parsed = ChatCompletionRequest.model_validate(body)
            params = parsed.sampling_params(llm.sampling_defaults)
        except ValidationError as exc:
            return _error(400, *_validation_message(exc))
        except ValueError as exc:  # SamplingParams' own checks
            return _error(400, str(exc))
        messages = [{"role": m.role, "content": m.text()} for m in parsed.messages]
        try:
            prompt_ids = await anyio.to_thread.run_sync(
                lambda: llm.encode(llm.render_chat(messages, parsed.thinking))
            )
        except Exception as exc:  # a template error is the client's
            return _error(400, f"cannot render the chat template: {exc}", "messages")
        if params.json_schema is not None:
            try:
                await anyio.to_thread.run_sync(llm.compile_schema, params.json_schema)
            except StructuredOutputError as exc:
                return _error(400, str(exc), "response_format")
        if len(prompt_ids) >= llm.options.max_model_len:
            return _error(
                400,
                f"the prompt has {len(prompt_ids)} tokens; this server's context is {llm.options.max_model_len} tokens "
                "(max_model_len), prompt and answer together",
                "messages",
            )
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        if parsed.stream:
            return EventSourceResponse(
                _stream(llm, prompt_ids, params, parsed.thinking, request_id, model_name),
                ping=15,
            )
        try:
            deltas = await _until_disconnected(request, _collect(llm, prompt_ids, params))
        except PromptTooLong as exc:
            return _error(400, str(exc), "messages")
        if deltas is None:  # the client left; its request was cancelled
            return Response(status_code=499)
        text = "".join(d.text for d in deltas)
        last = deltas[-1]
        reasoning, content = split_reasoning(text, parsed.thinking)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        message["reasoning_content"] = reasoning or None
        return JSONResponse(
            {
                "id": request_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model_name,
                "choices": [{"index": 0, "message": message, "finish_reason": last.finish_reason}],
                "usage": _usage(len(prompt_ids), last.num_generated, last.num_cached_tokens),
            }
        )

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ]
    )


async def _collect(llm: LLM, prompt_ids: list[int], params: SamplingParams) -> list[StreamDelta]:
    return [delta async for delta in llm.generate_async(prompt_ids, params)]


async def _until_disconnected(request: Request, work) -> Any:
    """Runs `work`; if the client disconnects first, cancels it (the request leaves the batch) and returns None."""
    result: list[tuple[bool, Any]] = []

    async def run() -> None:
        try:
            result.append((True, await work))
        except Exception as exc:  # noqa: BLE001 -- raised below, outside the task group's exception group
            result.append((False, exc))
        scope.cancel()

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        scope.cancel()

    async with anyio.create_task_group() as group:
        scope = group.cancel_scope
        group.start_soon(run)
        group.start_soon(watch)
    if not result:
        return None
    ok, value = result[0]
    if not ok:
        raise value
    return value


def _usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},  # OpenAI's field: prompt tokens from the cache
    }


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": status}},
        status,
    )


async def _stream(
    llm: LLM,
    prompt_ids: list[int],
    params: SamplingParams,
    thinking: bool,
    request_id: str,
    model_name: str,
) -> AsyncIterator[str]:
    """SSE chunks in OpenAI's shape. When the client goes away, sse-starlette cancels this generator, which
    cancels the request in the engine."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, usage: dict | None = None) -> str:
        payload: dict[str, Any] = {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model_name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if usage is not None:
            payload["usage"] = usage
        return json.dumps(payload)

    splitter = ReasoningStreamSplitter(thinking)
    yield chunk({"role": "assistant", "content": ""})
    try:
        async for item in llm.generate_async(prompt_ids, params):
            reasoning, content = splitter.feed(item.text)
            if item.finished:
                tail_reasoning, tail_content = splitter.flush()
                reasoning, content = reasoning + tail_reasoning, content + tail_content
            if reasoning:
                yield chunk({"reasoning_content": reasoning})
            if content:
                yield chunk({"content": content})
            if item.finished:
                yield chunk(
                    {},
                    item.finish_reason,
                    _usage(len(prompt_ids), item.num_generated, item.num_cached_tokens),
                )
    except Exception as exc:  # noqa: BLE001 -- the stream has started: report in-band, as OpenAI does
        yield json.dumps({"error": {"message": str(exc), "type": "server_error"}})
    yield "[DONE]"


def serve(
    llm: LLM,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    sock: socket.socket | None = None,
) -> None:
    """`sock`: a socket already bound and listening (engine/cli.py binds it before the model loads)."""
    import uvicorn

    app = build_app(llm, served_model_name)
    if sock is None:
        uvicorn.run(app, host=host, port=port, log_level="info")
        return
    config = uvicorn.Config(app, host=host, port=sock.getsockname()[1], log_level="info")
    uvicorn.Server(config).run(sockets=[sock])
