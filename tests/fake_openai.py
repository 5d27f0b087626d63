"""A scripted OpenAI-compatible HTTP server for tests: real sockets, real SSE, answers chosen by the test.

    def script(body: dict, call_number: int) -> Reply:
        assert "Turn 1" in body["messages"][-1]["content"]
        return Reply(content="**Environment Observation:** ok", reasoning="the file exists")

    with ScriptedOpenAIServer(script) as server:
        backend = OpenAIWorldModel(server.base_url, "m")   # server.base_url ends in /v1
        ...
    assert server.requests[0].body["stream"] is True

``reject_response_format`` (an error message) makes the server refuse every request that carries
``response_format`` with HTTP 400 and that message, as a server without structured output does; the refused
request is recorded and does not consume the script.

``refuse`` maps a request field to a Reply (an error status and body): a request carrying that top-level field gets
it, as a server that rejects that form of constraint answers; recorded, and the script is not consumed.
``model_card`` adds to (or overrides) the server's `GET /v1/models` entry, e.g. ``{"owned_by": "vllm"}`` as vLLM
lists its model; ``version`` makes it answer `GET /version` as vLLM does. Both GETs are recorded in ``probes``.

``script`` may also be a list of replies (call n gets item n, the last one repeats). ``call_number`` counts chat
completion requests from 0. An exception raised by the script becomes an HTTP 500 whose body names it, and is kept
in ``server.script_errors`` so the test can re-raise it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send


@dataclass
class Reply:
    """How the server answers one chat completion request."""

    content: str = ""
    reasoning: str = ""
    status: int = 200
    body: str | None = None  # raw body for an error status; a JSON error object when None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # before the response starts
    chunk_delay_s: float = 0.0  # between SSE chunks
    stream_chunks: int = 3  # the content and the reasoning are each split into this many SSE chunks
    break_connection: bool = False  # send the response head, then drop the connection
    reasoning_field: str = "reasoning_content"  # newer vLLM uses "reasoning"
    finish_reason: str = "stop"
    send_usage: bool = (
        True  # only when the request asks for it (stream_options.include_usage) or is not streamed
    )
    ignore_stream: bool = False  # answer with one JSON completion even when asked to stream
    end_after_chunks: int | None = (
        None  # close the stream cleanly after this many deltas: no finish, no [DONE]
    )
    raw_json: Any = None  # answer 200 with exactly this JSON body (a malformed completion shape)
    # stream this error object after the first chunk, then [DONE] (vLLM and SGLang report failures after the 200)
    error_chunk: dict[str, Any] | None = None


@dataclass
class ReceivedRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]  # lower-case names


Script = Callable[[dict[str, Any], int], Reply] | Sequence[Reply]


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    parts = max(1, min(parts, len(text)))
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


class _DropConnection:
    """ASGI response that starts a streamed 200 and then dies, as when a server process crashes mid-answer."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"data: {", "more_body": True})
        # Returning without finishing the body makes uvicorn close the connection mid-message.


class ScriptedOpenAIServer:
    """Context manager running the fake server on a free 127.0.0.1 port in a background thread."""

    def __init__(
        self,
        script: Script,
        *,
        model: str = "fake-world-model",
        reject_response_format: str | None = None,
        refuse: dict[str, Reply] | None = None,
        model_card: dict[str, Any] | None = None,
        version: str | None = None,
    ) -> None:
        self.script = script
        self.model = model
        self.reject_response_format = reject_response_format
        self.refuse = dict(refuse or {})
        self.model_card = dict(model_card or {})
        self.version = version
        self.requests: list[ReceivedRequest] = []
        self.probes: list[str] = []  # paths of the GETs that identify the server
        self.script_errors: list[BaseException] = []
        self._calls = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._socket: socket.socket | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- lifecycle -------------------------------------------------------------------------------------------

    def __enter__(self) -> ScriptedOpenAIServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._socket = sock  # uvicorn serves on this very socket; closed after the server stops
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(),
            log_level="critical",  # a dropped connection is a scripted event, not an error worth a traceback
            lifespan="off",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        # A bound for a hung start (it takes milliseconds), not a speed check.
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None and self._thread is not None and self._socket is not None
        self._server.should_exit = True
        self._thread.join(timeout=5)
        if self._thread.is_alive():  # a client still holding a slow stream open
            self._server.force_exit = True
            self._thread.join(timeout=5)
        self._socket.close()

    # --- the app ---------------------------------------------------------------------------------------------

    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/version", self._version, methods=["GET"]),
            ]
        )

    async def _models(self, request: Request) -> Response:
        self.probes.append(request.url.path)
        card = {"id": self.model, "object": "model", "owned_by": "tests", **self.model_card}
        return JSONResponse({"object": "list", "data": [card]})

    async def _version(self, request: Request) -> Response:
        self.probes.append(request.url.path)
        if self.version is None:
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse({"version": self.version})

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            number = self._calls
            self._calls += 1
        if callable(self.script):
            return self.script(body, number)
        return self.script[min(number, len(self.script) - 1)]

    async def _chat(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            return JSONResponse({"error": {"message": "body is not JSON", "type": "invalid_request"}}, 400)
        self.requests.append(
            ReceivedRequest(request.url.path, body, {k.lower(): v for k, v in request.headers.items()})
        )
        if self.reject_response_format is not None and "response_format" in body:
            error = {
                "error": {"message": self.reject_response_format, "type": "BadRequestError", "code": 400}
            }
            return JSONResponse(error, 400)
        refusal = next((self.refuse[name] for name in self.refuse if name in body), None)
        if refusal is not None:
            return Response(refusal.body or "", refusal.status, headers=refusal.headers)
        try:
            reply = self._next_reply(body)
        except Exception as error:  # the test inspects it; the client sees a 500
            self.script_errors.append(error)
            text = "".join(traceback.format_exception_only(error)).strip()
            return JSONResponse({"error": {"message": f"script failed: {text}", "type": "script_error"}}, 500)
        if reply.delay_s:
            await anyio.sleep(reply.delay_s)
        if reply.break_connection:
            return _DropConnection()
        if reply.raw_json is not None:
            return JSONResponse(reply.raw_json)
        if reply.status != 200:
            if reply.body is not None:
                return Response(reply.body, reply.status, headers=reply.headers)
            error = {
                "error": {
                    "message": f"scripted status {reply.status}",
                    "type": "scripted",
                    "code": reply.status,
                }
            }
            return JSONResponse(error, reply.status, headers=reply.headers)
        if body.get("stream") and not reply.ignore_stream:
            return StreamingResponse(
                self._sse(body, reply), media_type="text/event-stream", headers=reply.headers
            )
        return JSONResponse(self._completion(body, reply), headers=reply.headers)

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        completion = len(reply.content.split()) + len(reply.reasoning.split())
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning:
            message[reply.reasoning_field] = reply.reasoning
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        }
        if reply.send_usage:
            completion["usage"] = self._usage(body, reply)
        return completion

    async def _sse(self, body: dict[str, Any], reply: Reply) -> AsyncIterator[str]:
        header = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", self.model),
        }

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            return f"data: {json.dumps({**header, 'choices': [choice]})}\n\n"

        yield chunk({"role": "assistant", "content": ""})
        if reply.error_chunk is not None:
            yield f"data: {json.dumps({'error': reply.error_chunk})}\n\n"
            yield "data: [DONE]\n\n"
            return
        pieces = [{reply.reasoning_field: p} for p in _split(reply.reasoning, reply.stream_chunks)]
        pieces += [{"content": p} for p in _split(reply.content, reply.stream_chunks)]
        for delta in pieces[: reply.end_after_chunks]:
            if reply.chunk_delay_s:
                await anyio.sleep(reply.chunk_delay_s)
            yield chunk(delta)
        if reply.end_after_chunks is not None:
            return
        yield chunk({}, reply.finish_reason)
        if reply.send_usage and (body.get("stream_options") or {}).get("include_usage"):
            yield f"data: {json.dumps({**header, 'choices': [], 'usage': self._usage(body, reply)})}\n\n"
        yield "data: [DONE]\n\n"
