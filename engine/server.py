"""OpenAI-compatible HTTP server over the engine: /v1/chat/completions (streaming or not), /v1/models, /health.

Requests are served one at a time by the engine (its lock); generation runs in a worker thread so the event loop
stays responsive, and a client that disconnects cancels its request. Thinking is split into `reasoning_content`
the way vLLM's qwen3 reasoning parser does it: text before `</think>` is reasoning.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine.llm import LLM, StreamDelta
from engine.reasoning import ReasoningStreamSplitter, split_reasoning
from engine.sampling import SamplingParams

DEFAULT_MAX_TOKENS = 4096


class BadRequest(ValueError):
    pass


def _sampling_params(body: dict[str, Any]) -> SamplingParams:
    stop = body.get("stop")
    try:
        return SamplingParams(
            temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
            top_p=float(body.get("top_p") if body.get("top_p") is not None else 1.0),
            top_k=int(body.get("top_k") if body.get("top_k") is not None else 0),
            max_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS),
            seed=None if body.get("seed") is None else int(body["seed"]),
            stop=[stop] if isinstance(stop, str) else (list(stop) if stop else None),
            ignore_eos=bool(body.get("ignore_eos", False)),
            thinking_budget=body.get("thinking_budget"),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(str(exc)) from exc


def _parse_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    parsed = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise BadRequest("each message needs a 'role'")
        content = message.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        parsed.append({"role": str(message["role"]), "content": str(content)})
    return parsed


def _thinking_enabled(body: dict[str, Any]) -> bool:
    kwargs = body.get("chat_template_kwargs") or {}
    return bool(kwargs.get("enable_thinking", True))


def build_app(llm: LLM, served_model_name: str | None = None) -> Starlette:
    model_name = served_model_name or llm.model_name
    created = int(time.time())

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(_: Request) -> Response:
        card = {"id": model_name, "object": "model", "created": created, "owned_by": "engine"}
        return JSONResponse({"object": "list", "data": [card]})

    async def chat_completions(request: Request) -> Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            messages = _parse_messages(body)
            params = _sampling_params(body)
        except (BadRequest, json.JSONDecodeError) as exc:
            return _error(400, str(exc))
        thinking = _thinking_enabled(body)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        try:
            prompt_ids = llm.encode(llm.render_chat(messages, thinking))
        except Exception as exc:  # a template error is the client's
            return _error(400, f"cannot render the chat template: {exc}")
        if body.get("stream"):
            return StreamingResponse(
                _stream(llm, prompt_ids, params, thinking, request_id, model_name, request),
                media_type="text/event-stream",
            )
        cancel = threading.Event()
        try:
            deltas = await anyio.to_thread.run_sync(
                lambda: list(llm.generate_stream(prompt_ids, params, stop=cancel)), abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            cancel.set()
            raise
        except ValueError as exc:
            return _error(400, str(exc))
        text = "".join(d.text for d in deltas)
        last = deltas[-1]
        reasoning, content = split_reasoning(text, thinking)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        message["reasoning_content"] = reasoning or None
        return JSONResponse(
            {
                "id": request_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model_name,
                "choices": [{"index": 0, "message": message, "finish_reason": last.finish_reason}],
                "usage": _usage(len(prompt_ids), last.num_generated),
            }
        )

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ]
    )


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "code": status}}, status
    )


async def _stream(
    llm: LLM,
    prompt_ids: list[int],
    params: SamplingParams,
    thinking: bool,
    request_id: str,
    model_name: str,
    request: Request,
) -> AsyncIterator[str]:
    """SSE chunks in OpenAI's shape. A worker thread runs the generation and hands deltas to the event loop; when
    the client goes away the response generator is closed, which sets the cancel flag and stops the decode loop."""
    cancel = threading.Event()
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[StreamDelta | BaseException | None] = asyncio.Queue()

    def produce() -> None:
        try:
            for delta in llm.generate_stream(prompt_ids, params, stop=cancel):
                loop.call_soon_threadsafe(queue.put_nowait, delta)
        except BaseException as exc:  # handed to the consumer, which reports it to the client
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

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
        return f"data: {json.dumps(payload)}\n\n"

    splitter = ReasoningStreamSplitter(thinking)
    worker = threading.Thread(target=produce, name=f"generate-{request_id}", daemon=True)
    worker.start()
    try:
        yield chunk({"role": "assistant", "content": ""})
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                yield f"data: {json.dumps({'error': {'message': str(item)}})}\n\n"
                break
            reasoning, content = splitter.feed(item.text)
            if item.finished:
                tail_reasoning, tail_content = splitter.flush()
                reasoning, content = reasoning + tail_reasoning, content + tail_content
            if reasoning:
                yield chunk({"reasoning_content": reasoning})
            if content:
                yield chunk({"content": content})
            if item.finished:
                yield chunk({}, item.finish_reason, _usage(len(prompt_ids), item.num_generated))
        yield "data: [DONE]\n\n"
    finally:
        cancel.set()


def serve(llm: LLM, host: str = "127.0.0.1", port: int = 8000, served_model_name: str | None = None) -> None:
    import uvicorn

    uvicorn.run(build_app(llm, served_model_name), host=host, port=port, log_level="info")
