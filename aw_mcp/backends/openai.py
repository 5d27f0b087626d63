"""World model behind any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, ``aw-mcp engine serve``).

``base_url`` follows the OpenAI SDK convention: it already includes the API prefix (``http://host:8000/v1``), and
requests go to ``{base_url}/chat/completions``. A URL without ``/v1`` is used as given, so a server that mounts the
API elsewhere still works.

The answer is streamed (SSE) so the caller can report progress while the model thinks; a server that ignores
``stream`` and answers with one JSON completion is accepted too. Thinking arrives in ``delta.reasoning_content``
(SGLang, older vLLM) or ``delta.reasoning`` (newer vLLM), depending on the server's reasoning parser.

A call with a constraint (a tool with an outputSchema) asks for it as vLLM and SGLang accept it: ``response_format =
{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}``; the answer is then the bare JSON (a
reasoning parser keeps the thinking free). Support is learnt once per backend: when a request carrying
``response_format`` is refused with HTTP 400 or 422 and the same request without it succeeds, the server is taken
not to support it when the error body names it (response_format, json_schema, guided, structured, grammar) or no
constrained request has succeeded yet; one warning is logged and it is never sent again (validate-and-retry
remains). When constrained requests had succeeded before, the refusal is taken to be about that one schema, which
is then no longer sent (one warning per tool). A request refused again without it reports the second error.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx

from aw_mcp.backends.base import (
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
    WorldModel,
)

log = logging.getLogger(__name__)

BODY_EXCERPT_CHARS = 500
# An error body that names one of these blames the constraint (vLLM, SGLang, TGI and OpenAI wordings).
_CONSTRAINT_WORDS = re.compile(
    r"response_format|json_schema|guided|structured|grammar|xgrammar|outlines", re.I
)
MAX_CHECKED_BODY = 8000
PROGRESS_INTERVAL_S = (
    0.25  # at most ~4 progress notifications per second; clients render them, not count them
)
MAX_RETRY_AFTER_S = 60.0  # a server asking for a longer pause is better reported than waited on
CONNECT_TIMEOUT_S = 10.0


def redact_url(url: str) -> str:
    """The URL without `user:password@` (credentials must not reach error texts, logs or trajectories)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redact_text(text: str, url: str) -> str:
    """`text` with the credentials of `url` removed wherever they appear (httpx messages quote the URL)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return text
    text = text.replace(url, redact_url(url))
    for secret in (parts.password, parts.username):
        if secret:
            text = text.replace(secret, "***")
    return text


class _Rejected(BackendError):
    """The server refused the request (a 4xx other than 429): the same request would fail the same way."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def schema_name(tool: str) -> str:
    """A `json_schema.name` servers accept (OpenAI: 1-64 of A-Z a-z 0-9 _ -)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", tool)[:64] or "observation"


class _Retryable(Exception):
    """One attempt failed in a way a later attempt may not (overload, server error, dropped connection)."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass
class _Accumulator:
    """What the stream has delivered so far."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunks: int = 0  # content/reasoning chunks: the token count when the server sends no usage

    @property
    def tokens(self) -> int:
        return max(self.chunks, self.completion_tokens or 0)

    def add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
            if isinstance(completion, int):
                self.completion_tokens = completion


def _excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) <= BODY_EXCERPT_CHARS else text[:BODY_EXCERPT_CHARS] + "…"


def _retry_after_seconds(value: str | None) -> float | None:
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


def _reasoning_of(part: dict[str, Any]) -> str:
    return part.get("reasoning_content") or part.get("reasoning") or ""


class OpenAIWorldModel(WorldModel):
    """Streams chat completions from an OpenAI-compatible server, with retries on transient failures."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        http_client: httpx.AsyncClient | None = None,
        send_api_key: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._raw_url = f"{self.base_url}/chat/completions"
        self.url = redact_url(self._raw_url)  # what messages show
        self.model = model
        # A world file's own base_url gets no key unless trusted (send_api_key=False): a shared world file must
        # not be able to collect AW_API_KEY.
        env_key = os.environ.get("AW_API_KEY") or None
        self.api_key = (api_key if api_key is not None else env_key) if send_api_key else None
        self.retries = max(0, retries)  # extra attempts after the first
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s  # a deadline for one generate(): every attempt, wait and stream included
        self.timeout = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self._owns_client = http_client is None
        self._client = http_client if http_client is not None else httpx.AsyncClient(timeout=self.timeout)
        # Does the server take response_format? None: not known yet; True: it took one; False: it refused it.
        self.response_format_supported: bool | None = None
        self._refused_tools: set[str] = set()  # tools whose schema alone was refused

    def request_body(self, messages: list[ChatMessage], params: GenerationParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if params.top_p is not None:
            body["top_p"] = params.top_p
        if params.top_k is not None:
            body["top_k"] = params.top_k
        if not params.thinking:
            # Fast mode. vLLM and SGLang pass these to the chat template; Qwen's template switches thinking off with
            # it. Thinking on is the template's default, as in the official evaluation, which sends nothing.
            body["chat_template_kwargs"] = {"enable_thinking": False}
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        constraint = params.constraint
        if (
            constraint is not None
            and self.response_format_supported is not False
            and constraint.name not in self._refused_tools
        ):
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(constraint.name),
                    "schema": constraint.json_schema,
                    "strict": True,
                },
            }
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream, application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    async def generate(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        on_progress: ProgressCallback | None = None,
        call: CallRef | None = None,
    ) -> Generation:
        body = self.request_body(messages, params)
        deadline = time.monotonic() + self.timeout_s
        try:
            generation = await self._generate(body, on_progress, deadline)
        except _Rejected as rejection:
            if "response_format" not in body or not self._may_blame_constraint(rejection):
                raise
            plain = {key: value for key, value in body.items() if key != "response_format"}
            generation = await self._generate(plain, on_progress, deadline)  # a second refusal is reported
            self._constraint_refused(params, rejection)
            return generation
        if "response_format" in body:
            self.response_format_supported = True
        return generation

    def _may_blame_constraint(self, rejection: _Rejected) -> bool:
        if rejection.status not in (400, 422):
            return False
        return self.response_format_supported is None or bool(_CONSTRAINT_WORDS.search(rejection.body))

    def _constraint_refused(self, params: GenerationParams, rejection: _Rejected) -> None:
        """The request went through without response_format after a refusal with it: remember, warn once."""
        named = bool(_CONSTRAINT_WORDS.search(rejection.body))
        if self.response_format_supported is True and named and params.constraint is not None:
            tool = params.constraint.name
            if tool not in self._refused_tools:
                self._refused_tools.add(tool)
                log.warning(
                    "world model server %s refused the output schema of %s as response_format (%s); decoding "
                    "that tool unconstrained, validated afterwards",
                    self.url,
                    tool,
                    _excerpt(rejection.body),
                )
            return
        if self.response_format_supported is not False:
            self.response_format_supported = False
            log.warning(
                "world model server %s does not accept response_format (HTTP %d: %s); falling back to "
                "validate-and-retry for every structured tool",
                self.url,
                rejection.status,
                _excerpt(rejection.body),
            )

    async def _generate(
        self, body: dict[str, Any], on_progress: ProgressCallback | None, deadline: float
    ) -> Generation:
        attempts = self.retries + 1
        last_reason = "no attempt made"
        attempt = 0
        for attempt in range(1, attempts + 1):
            try:
                with anyio.fail_after(max(deadline - time.monotonic(), 0.0)):
                    generation = await self._attempt(body, on_progress)
            except TimeoutError:
                raise BackendError(
                    f"world model server {self.url} gave no complete answer within timeout_s={self.timeout_s:g} s "
                    f"({attempt} attempt(s)); last error before: {last_reason}"
                ) from None
            except _Retryable as failure:
                last_reason = redact_text(failure.reason, self._raw_url)
                if attempt == attempts:
                    break
                delay = self._delay(attempt, failure.retry_after_s)
                left = deadline - time.monotonic()
                if delay >= left or delay > MAX_RETRY_AFTER_S:
                    asked = (
                        f"asked to retry after {failure.retry_after_s:g} s"
                        if failure.retry_after_s
                        else (f"the next retry is due in {delay:.1f} s")
                    )
                    raise BackendError(
                        f"world model server {self.url} failed ({last_reason}) and {asked}: longer than the "
                        f"call's remaining {max(left, 0):.1f} s of timeout_s={self.timeout_s:g} "
                        f"(or than {MAX_RETRY_AFTER_S:g} s), so it is reported instead of waited on"
                    ) from None
                await anyio.sleep(delay)
                continue
            generation.extra["attempts"] = attempt
            return generation
        raise BackendError(
            f"world model server {self.url} failed after {attempts} attempt(s); last error: {last_reason}"
        )

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return retry_after_s
        # Full jitter keeps several clients that failed together from retrying in lockstep.
        base = self.backoff_s * 2 ** (attempt - 1)
        return base * (0.5 + random.random() / 2)

    async def _attempt(self, body: dict[str, Any], on_progress: ProgressCallback | None) -> Generation:
        try:
            async with self._client.stream(
                "POST", self._raw_url, json=body, headers=self._headers(), timeout=self.timeout
            ) as response:
                if response.status_code != 200:
                    await self._raise_for_status(response)
                content_type = response.headers.get("content-type", "")
                if "text/event-stream" in content_type:
                    acc = await self._read_stream(response.aiter_lines(), on_progress)
                else:
                    acc = self._read_whole(await response.aread())
        except httpx.UnsupportedProtocol as error:
            detail = redact_text(str(error), self._raw_url)
            raise BackendError(f"world model URL {self.url} is not usable: {detail}") from None
        except httpx.TransportError as error:  # connect/read errors, timeouts, dropped connections
            detail = redact_text(str(error) or "no detail", self._raw_url)
            raise _Retryable(f"{type(error).__name__}: {detail}") from None
        if on_progress is not None:
            await on_progress(acc.tokens, "done")
        return Generation(
            text=acc.content,
            reasoning=acc.reasoning,
            finish_reason=acc.finish_reason,
            prompt_tokens=acc.prompt_tokens,
            completion_tokens=acc.completion_tokens,
        )

    async def _raise_for_status(self, response: httpx.Response) -> None:
        status = response.status_code
        text = (await response.aread()).decode("utf-8", errors="replace")
        excerpt = _excerpt(text)
        reason = f"HTTP {status}: {excerpt or '(empty body)'}"
        if status == 429 or status >= 500:
            raise _Retryable(reason, _retry_after_seconds(response.headers.get("retry-after")))
        # Other 4xx (bad request, auth, unknown model) will fail the same way every time.
        raise _Rejected(
            f"world model server {self.url} rejected the request: {reason}", status, text[:MAX_CHECKED_BODY]
        )

    async def _read_stream(self, lines: Any, on_progress: ProgressCallback | None) -> _Accumulator:
        acc = _Accumulator()
        last_report = time.monotonic()
        done = False
        async for line in lines:
            if not line.startswith("data:"):
                continue  # blank separators, comments (": ping"), event/id fields
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError as error:
                raise _Retryable(f"malformed stream chunk {_excerpt(data)!r}: {error}") from error
            self._apply_chunk(chunk, acc)
            if on_progress is not None and time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                last_report = time.monotonic()
                await on_progress(acc.tokens, "answering" if acc.content else "thinking")
        if not done and acc.finish_reason is None:
            raise _Retryable(f"stream ended after {acc.chunks} chunk(s) without finishing")
        return acc

    def _apply_chunk(self, chunk: Any, acc: _Accumulator) -> None:
        if not isinstance(chunk, dict):
            raise _Retryable(f"unexpected stream chunk {_excerpt(json.dumps(chunk))}")
        if "error" in chunk:  # vLLM reports failures after the 200 header as an error chunk
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise _Retryable(f"error in stream: {_excerpt(str(message))}")
        acc.add_usage(chunk.get("usage"))
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise _Retryable(f"malformed stream chunk (choices is not a list): {_excerpt(json.dumps(chunk))}")
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(choice, dict) or not isinstance(delta or {}, dict):
                raise _Retryable(f"malformed stream chunk: {_excerpt(json.dumps(chunk))}")
            if choice.get("index", 0) != 0:
                continue
            delta = delta or {}
            reasoning = _reasoning_of(delta)
            content = delta.get("content") or ""
            if not isinstance(reasoning, str) or not isinstance(content, str):
                raise _Retryable(
                    f"malformed stream chunk (text is not a string): {_excerpt(json.dumps(chunk))}"
                )
            if reasoning or content:
                acc.chunks += 1
            acc.reasoning += reasoning
            acc.content += content
            if choice.get("finish_reason"):
                acc.finish_reason = choice["finish_reason"]

    def _read_whole(self, raw: bytes) -> _Accumulator:
        text = raw.decode("utf-8", errors="replace")
        try:
            completion = json.loads(text)
        except json.JSONDecodeError as error:
            raise _Retryable(f"response is not JSON: {_excerpt(text)!r}") from error
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not choices:
            raise _Retryable(f"response has no choices: {_excerpt(text)!r}")
        first = choices[0] if isinstance(choices, list) else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict) or not all(
            isinstance(message.get(k) or "", str) for k in ("content", "reasoning_content", "reasoning")
        ):
            raise _Retryable(f"malformed response (no choices[0].message with text): {_excerpt(text)!r}")
        acc = _Accumulator(
            content=message.get("content") or "",
            reasoning=_reasoning_of(message),
            finish_reason=choices[0].get("finish_reason"),
        )
        acc.add_usage(completion.get("usage"))  # type: ignore[union-attr]
        acc.chunks = 1 if acc.content or acc.reasoning else 0
        return acc

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
