"""Reading an OpenAI-compatible server's answer without letting it hold the event loop: a body in pieces of at most
64 KiB with a checkpoint between them (inflated piece by piece when compressed), stream lines bounded in bytes, the
streamed answer accumulated in parts, the errors an attempt may retry, and a server's words quoted short and
redacted."""

from __future__ import annotations

import email.utils
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import httpx

from aw_mcp.core.model_io import BackendError
from aw_mcp.core.redaction import redact_secrets

BODY_EXCERPT_CHARS = 500
READ_PIECE_BYTES = 64 * 1024  # a body is handled in pieces of at most this, with a checkpoint between them
ENVELOPE_BYTES = 64 * 1024  # a completion's JSON around its text (ids, usage, a short finish)


def wire_limit(max_answer_bytes: int) -> int:
    """The most bytes read of a non-streamed body or of one stream line: the answer JSON-escaped (a server that
    escapes non-ASCII text writes up to twice its UTF-8 bytes) plus the envelope."""
    return 2 * max_answer_bytes + ENVELOPE_BYTES


class Retryable(Exception):
    """One attempt failed in a way a later attempt may not (overload, server error, dropped connection)."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class StreamError(Retryable):
    """The server reported an error inside a stream it had started with HTTP 200."""

    def __init__(self, message: str, code: Any) -> None:
        super().__init__(f"error in stream: {excerpt_of(message)}")
        self.message = message
        self.code = code


@dataclass
class Accumulator:
    """What the stream has delivered so far (the text in parts, joined once at the end: no quadratic copying)."""

    content_parts: list[str] = field(default_factory=list)
    reasoning_parts: list[str] = field(default_factory=list)
    answer_bytes: int = 0  # text and reasoning so far, UTF-8: what max_answer_bytes bounds
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunks: int = 0  # content/reasoning chunks: the token count when the server sends no usage

    @property
    def tokens(self) -> int:
        return max(self.chunks, self.completion_tokens or 0)

    @property
    def content(self) -> str:
        return "".join(self.content_parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    @property
    def answering(self) -> bool:
        return bool(self.content_parts)

    def add_text(self, reasoning: str, content: str) -> None:
        if reasoning:
            self.reasoning_parts.append(reasoning)
            self.answer_bytes += len(reasoning.encode("utf-8", "surrogatepass"))
        if content:
            self.content_parts.append(content)
            self.answer_bytes += len(content.encode("utf-8", "surrogatepass"))

    def add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
            if isinstance(completion, int):
                self.completion_tokens = completion


class Inflater:
    """A gzip or deflate body inflated piece by piece, each at most READ_PIECE_BYTES (a small compressed chunk can
    expand a thousandfold: it is never inflated whole)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._raw_fallback = encoding == "deflate"  # "deflate" is zlib-wrapped, but some servers send it raw
        self._z = zlib.decompressobj(
            zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        )

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            try:
                out = self._z.decompress(data, READ_PIECE_BYTES)
            except zlib.error as error:
                if self._raw_fallback:
                    self._raw_fallback = False
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise Retryable(f"cannot inflate the {self.encoding} response body: {error}") from None
            self._raw_fallback = False
            data = self._z.unconsumed_tail
            if out:
                yield out
            if not data and len(out) < READ_PIECE_BYTES:
                return


async def body_pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body of `response` in pieces of at most READ_PIECE_BYTES, with a checkpoint after each: the call's
    deadline and a client's cancel interrupt the read there, and other tasks run between pieces."""
    if (
        response.is_stream_consumed
    ):  # already in memory, decoded (a test's transport): still handed out in pieces
        content = response.content
        for start in range(0, len(content), READ_PIECE_BYTES):
            yield content[start : start + READ_PIECE_BYTES]
            await anyio.lowlevel.checkpoint()
        return
    encoding = response.headers.get("content-encoding", "").strip().lower()
    inflater = None
    if encoding not in ("", "identity"):
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise BackendError(
                f"the world model server sent its answer with Content-Encoding: {excerpt_of(encoding)}, which is "
                "not read here (requests ask for identity; gzip and deflate are read too)"
            )
        inflater = Inflater(encoding)
    async for raw in response.aiter_raw():
        for start in range(0, len(raw), READ_PIECE_BYTES):
            data = raw[start : start + READ_PIECE_BYTES]
            for piece in inflater.feed(data) if inflater is not None else (data,):
                yield piece
                await anyio.lowlevel.checkpoint()


def utf8_text(data: bytes | bytearray, what: str = "the answer") -> str:
    """`data` as UTF-8 text; bytes that are not UTF-8 are a Retryable error naming the first one, in a plain
    body and a stream alike (a stream's used to become U+FFFD text)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Retryable(
            f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start:,}: {exc.reason})"
        ) from None


def _decoded_lines(line: bytearray) -> list[str]:
    """One line as text: a CR before the LF is dropped; a lone CR also ends a line (SSE allows CR, LF, CRLF)."""
    text = utf8_text(line, "a line of the streamed answer")
    return text.removesuffix("\r").split("\r")


async def body_lines(
    pieces: AsyncIterator[bytes], limit: int, too_long: Callable[[], Exception]
) -> AsyncIterator[str]:
    """The lines of a body, each at most `limit` bytes: a longer one raises `too_long()` as soon as it passes the
    limit, before it is decoded or kept whole."""
    pending = bytearray()
    async with aclosing(pieces):
        async for piece in pieces:
            start = 0
            while (end := piece.find(b"\n", start)) >= 0:
                pending += piece[start:end]
                if len(pending) > limit:
                    raise too_long()
                lines = _decoded_lines(pending)
                pending.clear()
                for line in lines:
                    yield line
                start = end + 1
            pending += piece[start:]
            if len(pending) > limit:
                raise too_long()
    if pending:
        for line in _decoded_lines(pending):
            yield line


async def read_limited(pieces: AsyncIterator[bytes], limit: int) -> tuple[bytes, bool]:
    """The body, or its first `limit` bytes and True when it is longer (reading stops there)."""
    body = bytearray()
    async with aclosing(pieces):
        async for piece in pieces:
            body += piece
            if len(body) > limit:
                return bytes(body[:limit]), True
    return bytes(body), False


def excerpt_of(text: str) -> str:
    """A server's words as messages quote them: short, and without the API key (a server may echo its headers)."""
    text = redact_secrets(text).strip()  # whole, then cut: a key cut in two would no longer be found
    return text if len(text) <= BODY_EXCERPT_CHARS else text[:BODY_EXCERPT_CHARS] + "…"


def retry_after_seconds(value: str | None) -> float | None:
    """Parse ``Retry-After``: delta-seconds (also fractional, which test servers use) or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(seconds, 0.0)


def reasoning_of(part: dict[str, Any]) -> str:
    return part.get("reasoning_content") or part.get("reasoning") or ""
