"""Issue 21, item 2 (backend side): no answer may hold the loop. `model.max_answer_bytes` bounds what the OpenAI
backend reads of one answer, streamed or not: it stops reading as soon as the answer passes the limit (never
building, let alone parsing, the whole body first), the error names the setting, and the call's deadline interrupts
a body that is still arriving. No bound here is tight: each is 10x or more what the work takes."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import AsyncIterator, Callable

import anyio
import httpx
import pytest

from aw_mcp.backends.openai import OpenAIWorldModel
from aw_mcp.backends.openai_body import READ_PIECE_BYTES, Inflater, wire_limit
from aw_mcp.core.model_io import (
    DEFAULT_MAX_ANSWER_BYTES,
    AnswerTooLarge,
    BackendError,
    Generation,
    GenerationParams,
    answer_size,
    answer_size_problem,
)
from aw_mcp.load.world import load_world_text
from aw_mcp.spec.issues import WorldSpecError
from aw_mcp.spec.world import ModelSettings
from tests.conftest import SMALL_WORLD
from tests.fake_openai import Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.anyio
HI = [{"role": "user", "content": "hi"}]
FIFTY_MB = 50_000_000
MIB = 1024 * 1024


def test_the_setting_has_one_default_and_sane_bounds() -> None:
    assert ModelSettings().max_answer_bytes == DEFAULT_MAX_ANSWER_BYTES == GenerationParams().max_answer_bytes
    assert DEFAULT_MAX_ANSWER_BYTES == 4 * MIB
    world = load_world_text(SMALL_WORLD + "model: {max_answer_bytes: 65536}\n", "tiny_shop.yaml")
    assert world.model.max_answer_bytes == 65536
    for wrong in ("100", "'4MB'", "2000000000000"):
        with pytest.raises(WorldSpecError, match="max_answer_bytes"):
            load_world_text(SMALL_WORLD + f"model: {{max_answer_bytes: {wrong}}}\n", "tiny_shop.yaml")


def test_any_backend_s_answer_is_measured_the_same_way() -> None:
    """The simulator's check for every backend: text and reasoning together, as UTF-8."""
    small = Generation(text="é" * 10, reasoning="x" * 10)
    assert answer_size(small) == 30 and answer_size_problem(small, 1024) is None
    big = Generation(text="é" * 600)  # 600 characters, 1200 bytes
    problem = answer_size_problem(big, 1024)
    assert isinstance(problem, AnswerTooLarge) and "model.max_answer_bytes = 1,024 bytes" in str(problem)
    assert "1,200 bytes" in str(problem)


async def timed(call: Callable[[], object]) -> tuple[BaseException | object, float]:
    started = time.monotonic()
    try:
        result = await call()  # type: ignore[misc]
    except BaseException as error:  # noqa: BLE001 - the test inspects it
        result = error
    return result, time.monotonic() - started


@pytest.mark.parametrize("streamed", [False, True], ids=["one JSON body", "one SSE line"])
async def test_a_one_piece_50_mb_answer_ends_at_the_cap_with_an_error_naming_the_setting(
    streamed: bool,
) -> None:
    """The issue's answer: 50 MB in one piece. Before, it was read whole, parsed whole and returned."""
    huge = Reply(content="x" * FIFTY_MB, ignore_stream=not streamed, stream_chunks=1)
    with ScriptedOpenAIServer([huge, Reply(content="fine")]) as server:
        model = OpenAIWorldModel(server.base_url, "m", timeout_s=120, retries=3)
        error, took = await timed(lambda: model.generate(HI, GenerationParams()))
        await model.aclose()
    assert isinstance(error, AnswerTooLarge), error
    message = str(error)
    assert "model.max_answer_bytes = 4,194,304 bytes" in message and "Raise model.max_answer_bytes" in message
    assert f"{wire_limit(DEFAULT_MAX_ANSWER_BYTES):,} bytes" in message  # where reading stopped
    assert len(server.requests) == 1  # not retried: the same request would run away again
    assert took < 60  # a bound for a hung read, not a speed check: it takes well under a second


async def test_a_stream_stops_as_soon_as_its_text_passes_the_limit() -> None:
    """Many small chunks: the answer is counted as it arrives, reasoning included."""
    params = GenerationParams(max_answer_bytes=64 * 1024)
    long = Reply(reasoning="r" * 40_000, content="c" * 40_000, stream_chunks=80)
    with ScriptedOpenAIServer([long]) as server:
        model = OpenAIWorldModel(server.base_url, "m", timeout_s=60)
        with pytest.raises(
            AnswerTooLarge, match=r"at least 6\d,\d{3} bytes of answer \(reading stopped there\)"
        ):
            await model.generate(HI, params)
        await model.aclose()


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_answer_at_the_limit_is_taken_whole(streamed: bool) -> None:
    limit = 64 * 1024
    text = "é" * (limit // 4)  # 32 KiB of text ...
    thinking = "t" * (limit // 2)  # ... and 32 KiB of thinking: exactly the limit
    reply = Reply(content=text, reasoning=thinking, ignore_stream=not streamed, stream_chunks=7)
    with ScriptedOpenAIServer([reply]) as server:
        model = OpenAIWorldModel(server.base_url, "m", timeout_s=60)
        generation = await model.generate(HI, GenerationParams(max_answer_bytes=limit))
        await model.aclose()
    assert generation.text == text and generation.reasoning == thinking
    assert answer_size(generation) == limit


async def arriving(body: bytes) -> AsyncIterator[bytes]:
    """`body` as a network delivers it: 64 KiB at a time."""
    for start in range(0, len(body), 65536):
        yield body[start : start + 65536]


def mock_client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_the_deadline_interrupts_a_body_that_never_ends() -> None:
    """A server that keeps sending one line, never finishing it: timeout_s ends the call while the body is read."""
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'data: {"choices": [{"index": 0, "delta": {"content": "'
        while True:
            await anyio.sleep(0.01)
            sent += 1
            yield b"x" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=endless())

    model = OpenAIWorldModel("http://model/v1", "m", timeout_s=1, retries=0, http_client=mock_client(handler))
    error, took = await timed(lambda: model.generate(HI, GenerationParams(max_answer_bytes=1024**3)))
    assert isinstance(error, BackendError) and "within timeout_s=1 s" in str(error), error
    assert sent > 0 and took < 10


async def test_a_cancel_scope_outside_interrupts_the_read() -> None:
    """The simulator's deadline (anyio.move_on_after around generate) and a client's cancel end a read at once,
    whatever the backend's own timeout: even a burst that never pauses (empty deltas, forever) is read with a
    checkpoint between pieces."""
    empty = b'data: {"choices": [{"index": 0, "delta": {}}]}\n\n' * 1000

    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield empty

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=endless())

    model = OpenAIWorldModel("http://model/v1", "m", timeout_s=600, http_client=mock_client(handler))
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        await model.generate(HI, GenerationParams())
    assert scope.cancelled_caught and time.monotonic() - started < 10


async def test_a_gzip_bomb_is_inflated_piece_by_piece_and_stopped_at_the_cap() -> None:
    """50 MB that compress to 50 KB: never inflated whole, and reading stops at the cap."""
    completion = {"choices": [{"index": 0, "message": {"content": "x" * FIFTY_MB}, "finish_reason": "stop"}]}
    bomb = gzip.compress(json.dumps(completion).encode(), compresslevel=9)
    assert len(bomb) < 1_000_000
    pieces = [len(p) for p in Inflater("gzip").feed(bomb[:65536])]
    assert pieces and max(pieces) <= READ_PIECE_BYTES

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept-encoding"] == "identity"  # we asked for none
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return httpx.Response(200, headers=headers, content=arriving(bomb))

    model = OpenAIWorldModel("http://model/v1", "m", timeout_s=60, http_client=mock_client(handler))
    with pytest.raises(AnswerTooLarge, match="response body of more than"):
        await model.generate(HI, GenerationParams(max_answer_bytes=MIB))


async def test_an_error_body_is_read_only_as_far_as_it_is_quoted() -> None:
    """A 50 MB error page: the excerpt is all that is read and kept."""
    huge = Reply(status=400, body="no: " + "x" * FIFTY_MB)
    with ScriptedOpenAIServer([huge]) as server:
        model = OpenAIWorldModel(server.base_url, "m", timeout_s=60)
        error, took = await timed(lambda: model.generate(HI, GenerationParams()))
        await model.aclose()
    assert isinstance(error, BackendError) and "HTTP 400: no: xxx" in str(error)
    assert len(str(error)) < 2000 and took < 60


async def test_stream_lines_are_found_across_pieces_with_any_line_ending() -> None:
    """The line reader that replaced httpx's: CRLF split between two pieces, a lone CR, a multi-byte character split."""

    def event(delta: dict) -> str:
        return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}, ensure_ascii=False)

    body = (
        f": ping\r\n\r\n{event({'reasoning_content': 'hm'})}\r\n\r\n{event({'content': 'é1'})}\r\r"
        f"{event({'content': '2'})}\n\n"
        + "data: "
        + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        + "\r\n\r\ndata: [DONE]\r\n\r\n"
    ).encode()
    cut = body.index("é".encode()) + 1  # inside the two bytes of é
    pieces = [
        body[:5],
        body[5 : body.index(b"\r\n", 10) + 1],
        body[body.index(b"\r\n", 10) + 1 : cut],
        body[cut:],
    ]

    async def arrive() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=arrive())

    model = OpenAIWorldModel("http://model/v1", "m", timeout_s=10, http_client=mock_client(handler))
    generation = await model.generate(HI, GenerationParams())
    assert (generation.reasoning, generation.text, generation.finish_reason) == ("hm", "é12", "stop")
