"""World model behind any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, ``aw-mcp engine serve``).

``base_url`` follows the OpenAI SDK convention: it already includes the API prefix (``http://host:8000/v1``), and
requests go to ``{base_url}/chat/completions``. A URL without ``/v1`` is used as given, so a server that mounts the
API elsewhere still works.

The answer is streamed (SSE) so the caller can report progress while the model thinks; a server that ignores
``stream`` and answers with one JSON completion is accepted too. Thinking arrives in ``delta.reasoning_content``
(SGLang, older vLLM) or ``delta.reasoning`` (newer vLLM), depending on the server's reasoning parser.

A call with a constraint (a tool with an outputSchema) is sent in the best form the server takes, tried in order:

1. the framed answer grammar (aw_mcp/prompt/grammar_text.py `framed_grammar`: the trained `**Environment Observation:**`
   frame, then the JSON indented as our engine writes it, or the plain-text `Error: ...` line), in the server's
   own field: vLLM `structured_outputs: {"grammar": ...}` (`guided_grammar` before 0.10.2), SGLang `ebnf`,
   llama.cpp's llama-server and llama-cpp-python's server `grammar` (GBNF). One text serves them all;
2. to such a server whose grammar was refused: the JSON Schema alone, `response_format = {"type": "json_schema",
   "json_schema": {"name", "schema", "strict": true}}` (llama-cpp-python: `{"type": "json_object", "schema": ...}`,
   the only form it takes): the answer is then bare JSON, without the frame;
3. nothing: free text, validated afterwards (validate-and-retry).

The grammar goes only to a server known to read its field: these servers ignore a field they do not know (vLLM
since 0.12 takes the old `guided_grammar` with HTTP 200 and decodes unconstrained), so a success would prove nothing.
The server is identified once per backend, on the first constrained call, by `GET /v1/models`: `owned_by` is
"vllm", "sglang", "llamacpp" (llama-server) or "me" with a `permissions` list (llama-cpp-python); for vLLM,
`GET /version` picks the field. Any other server (OpenAI itself, proxies, `aw-mcp engine serve`) gets 3: nothing
it could be asked to constrain keeps the frame the model was trained to answer in, so the answer is decoded free
and validated afterwards (one log line says so).

What a server refuses is learnt once per backend: when a constrained request is refused with HTTP 400 or 422 and a
lower form then succeeds, the server is taken not to take that form when the error body names it (response_format,
json_schema, guided, structured, grammar, ebnf) or no request in that form has succeeded yet; one warning is
logged and that form is never sent again. When requests in that form had succeeded before, the refusal is taken to
be about that one tool, whose constraint is then sent in the next form only (one warning per tool). A server
error (5xx) whose body names such a field is a refusal too, not retried: llama-cpp-python answers a
`response_format` it cannot parse with HTTP 500. A request refused again in the last form reports that error.

No answer may hold the event loop or the call's deadline (`max_answer_bytes`, from `model.max_answer_bytes`): bodies
are read in pieces of at most 64 KiB with a checkpoint between them (so `timeout_s` and a client's cancel interrupt a
read, and other sessions run), asked for uncompressed (a compressed one is inflated piece by piece, never whole); a
stream stops as soon as its text and reasoning together pass the limit, and a single stream line or a non-streamed
body as soon as it passes twice the limit plus 64 KiB (room for JSON escapes and the envelope), never building the
whole string first. Over the limit the call fails with AnswerTooLarge, naming the setting; it is not retried.

The API key is never echoed: every error text built from a server's words, and the answer itself, goes through
aw_mcp/core/redaction.py (the key and URL credentials become `***`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
import anyio.lowlevel
import httpx

from aw_mcp.backends.contract import WorldModel
from aw_mcp.backends.openai_body import (
    Accumulator,
    Retryable,
    StreamError,
    body_lines,
    body_pieces,
    excerpt_of,
    read_limited,
    reasoning_of,
    retry_after_seconds,
    utf8_text,
    wire_limit,
)
from aw_mcp.backends.openai_dialects import (
    CONSTRAINT_FIELDS,
    CONSTRAINT_WORDS,
    DIALECTS,
    GENERIC,
    GRAMMAR,
    JSON_SCHEMA,
    SERVER_FALLBACKS,
    TOOL_FALLBACKS,
    UNCONSTRAINED,
    Dialect,
    at_path,
    dialect_of,
    form_field,
    schema_name,
    vllm_dialect,
)
from aw_mcp.core.endpoint import endpoint
from aw_mcp.core.model_io import (
    AnswerConstraint,
    AnswerTooLarge,
    BackendError,
    CallRef,
    ChatMessage,
    Generation,
    GenerationParams,
    ProgressCallback,
)
from aw_mcp.core.redaction import redact_secrets, redact_text, redact_url, register_secret, url_secrets
from aw_mcp.core.settings import read_settings
from aw_mcp.prompt.constraint import ANSWER_INDENT
from aw_mcp.prompt.grammar_text import NotExpressible, framed_grammar

# The redactors, as before, from here too; the forms of constraint and `schema_name` too (tests and callers name
# them with the client). Body reading is openai_body.py, the servers' dialects openai_dialects.py.
__all__ = [
    "GRAMMAR",
    "JSON_SCHEMA",
    "OpenAIWorldModel",
    "UNCONSTRAINED",
    "redact_text",
    "redact_url",
    "schema_name",
]

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0  # identifying the server: a few small GETs, once
MAX_CHECKED_BODY = 8000
PROGRESS_INTERVAL_S = (
    0.25  # at most ~4 progress notifications per second; clients render them, not count them
)
MAX_RETRY_AFTER_S = 60.0  # a server asking for a longer pause is better reported than waited on
CONNECT_TIMEOUT_S = 10.0
ERROR_BODY_BYTES = 64 * 1024  # what is read of an error response (MAX_CHECKED_BODY of it is looked at)
PROBE_BODY_BYTES = 1024 * 1024  # what is read of a GET /models or /version answer


class _Rejected(BackendError):
    """The server refused the request (a 4xx other than 429): the same request would fail the same way."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


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
        dialect: str | None = None,
    ) -> None:
        """`dialect`: how the server takes constraints (a key of DIALECTS); None: found out on the first
        constrained call."""
        self.base_url = base_url.rstrip("/")
        self._raw_url = endpoint(self.base_url, "chat/completions")  # a query in the base URL stays a query
        self.url = redact_url(self._raw_url)  # what messages show
        for secret in url_secrets(self.base_url):  # `user:pw@` or `?api_key=` in the URL: redacted everywhere
            register_secret(secret)
        self.model = model
        # A world file's own base_url gets no key unless trusted (send_api_key=False): a shared world file must
        # not be able to collect AW_API_KEY.
        env_key = read_settings().api_key_value
        self.api_key = (api_key if api_key is not None else env_key) if send_api_key else None
        register_secret(self.api_key)  # never echoed back: error texts, answers and trajectories redact it
        self.retries = max(0, retries)  # extra attempts after the first
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s  # a deadline for one generate(): every attempt, wait and stream included
        self.timeout = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self._owns_client = http_client is None
        self._client = http_client if http_client is not None else httpx.AsyncClient(timeout=self.timeout)
        if dialect is not None and dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; known: {', '.join(DIALECTS)}")
        self.dialect: Dialect | None = DIALECTS[dialect] if dialect is not None else None
        self._identifying = anyio.Lock()
        # Does the server take each form of constraint? None: not known yet; True: it took one; False: it refused it.
        self.constraint_support: dict[str, bool | None] = {GRAMMAR: None, JSON_SCHEMA: None}
        # Tools whose constraint alone the server refused in that form.
        self._refused_tools: dict[str, set[str]] = {GRAMMAR: set(), JSON_SCHEMA: set()}
        # Tools whose grammar text was reported (what it leaves to validation, or that it cannot be written).
        self._noted_tools: set[str] = set()

    @property
    def response_format_supported(self) -> bool | None:
        """Whether the server takes the JSON Schema as response_format (None: not known yet)."""
        return self.constraint_support[JSON_SCHEMA]

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
        return body

    def _headers(self, accept: str = "text/event-stream, application/json") -> dict[str, str]:
        # Uncompressed: a compressed body could expand a thousandfold in one step (body_pieces inflates one anyway).
        headers = {"Accept": accept, "Accept-Encoding": "identity"}
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
        try:
            return await self._answer(messages, params, on_progress)
        except BackendError as error:
            # Every message built from a server's words is redacted where it is built; this is the last net.
            message = str(error)
            clean = redact_secrets(redact_text(message, self._raw_url))
            if clean == message:
                raise
            raise BackendError(clean) from None

    async def _answer(
        self, messages: list[ChatMessage], params: GenerationParams, on_progress: ProgressCallback | None
    ) -> Generation:
        body = self.request_body(messages, params)
        deadline = time.monotonic() + self.timeout_s
        limit = params.max_answer_bytes
        constraint = params.constraint
        if constraint is None:
            return await self._generate(body, on_progress, deadline, limit)
        dialect = await self._server_dialect()
        refusals: list[tuple[str, _Rejected]] = []
        for form, fields in self._constraint_forms(constraint, dialect):
            try:
                generation = await self._generate({**body, **fields}, on_progress, deadline, limit)
            except _Rejected as rejection:
                if not self._may_blame_constraint(form, rejection):
                    raise
                refusals.append((form, rejection))
                continue
            self._learn(constraint, dialect, refusals)
            self.constraint_support[form] = True
            generation.extra["constrained_as"] = form
            return generation
        # Unconstrained, the last form: a refusal here too is reported.
        generation = await self._generate(body, on_progress, deadline, limit)
        self._learn(constraint, dialect, refusals)
        generation.extra["constrained_as"] = UNCONSTRAINED
        return generation

    # --- the constraint: which server, which forms -----------------------------------------------------------------

    async def _server_dialect(self) -> Dialect:
        """The server's dialect, identified once (a server that cannot be reached is asked again next time)."""
        if self.dialect is None:
            async with self._identifying:
                if self.dialect is None:
                    self.dialect = await self._identify()
                    if self.dialect is GENERIC:
                        log.info(
                            "world model server %s is not known to take a grammar: structured answers are decoded "
                            "unconstrained and validated afterwards (the JSON Schema alone would lose the trained "
                            "frame)",
                            self.url,
                        )
                    elif self.dialect is not None:
                        log.info("world model server %s is %s", self.url, self.dialect.name)
        return self.dialect or GENERIC

    async def _identify(self) -> Dialect | None:
        try:
            key = dialect_of(await self._get_json(endpoint(self.base_url, "models")), self.model)
            if key == "vllm":
                version = endpoint(self.base_url, "version", drop_suffix="/v1")
                key = vllm_dialect(await self._get_json(version))
        except httpx.TransportError as error:
            log.debug(
                "could not identify world model server %s: %s",
                self.url,
                redact_text(str(error), self._raw_url),
            )
            return None
        return DIALECTS[key or "openai"]

    async def _get_json(self, url: str) -> Any:
        """What a GET of `url` answers as JSON, or None (another status, not JSON, or over PROBE_BODY_BYTES)."""
        async with self._client.stream(
            "GET",
            url,
            headers=self._headers("application/json"),
            timeout=min(PROBE_TIMEOUT_S, self.timeout_s),
        ) as response:
            if response.status_code != 200:
                return None
            try:
                raw, cut = await read_limited(body_pieces(response), PROBE_BODY_BYTES)
            except (BackendError, Retryable):
                return None
        if cut:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def _constraint_forms(
        self, constraint: AnswerConstraint, dialect: Dialect
    ) -> list[tuple[str, dict[str, Any]]]:
        """The request fields of each form this server may take the constraint in, best first."""
        forms = []
        if dialect.grammar_field and self._may_send(GRAMMAR, constraint):
            grammar = self._grammar_text(constraint)
            if grammar is not None:
                forms.append((GRAMMAR, at_path(dialect.grammar_field, grammar)))
        if dialect.schema_alone and self._may_send(JSON_SCHEMA, constraint):
            if dialect.json_object:
                response_format = {"type": "json_object", "schema": constraint.json_schema}
            else:
                named = {
                    "name": schema_name(constraint.name),
                    "schema": constraint.json_schema,
                    "strict": True,
                }
                response_format = {"type": "json_schema", "json_schema": named}
            forms.append((JSON_SCHEMA, {"response_format": response_format}))
        return forms

    def _may_send(self, form: str, constraint: AnswerConstraint) -> bool:
        return self.constraint_support[form] is not False and constraint.name not in self._refused_tools[form]

    def _grammar_text(self, constraint: AnswerConstraint) -> str | None:
        """The framed answer's grammar, or None when the schema cannot be written as one (reported once per
        tool, as is what the grammar leaves to validation)."""
        first_time = constraint.name not in self._noted_tools
        self._noted_tools.add(constraint.name)
        try:
            grammar = framed_grammar(constraint, ANSWER_INDENT)
        except NotExpressible as why:
            if first_time:
                log.info(
                    "the output schema of %s cannot be written as a grammar (%s); sending it as JSON Schema",
                    constraint.name,
                    why,
                )
            return None
        if first_time and grammar.loosened:
            log.info(
                "the answer grammar of %s leaves to validation: %s",
                constraint.name,
                "; ".join(grammar.loosened),
            )
        return grammar.text

    def _may_blame_constraint(self, form: str, rejection: _Rejected) -> bool:
        named = bool(CONSTRAINT_WORDS.search(rejection.body))
        if rejection.status >= 500:
            return named  # only a server error naming the constraint is a refusal (_raise_for_status)
        if rejection.status not in (400, 422):
            return False
        return self.constraint_support[form] is None or named

    def _learn(
        self, constraint: AnswerConstraint, dialect: Dialect, refusals: list[tuple[str, _Rejected]]
    ) -> None:
        """A request went through after these refusals: remember each, warn once."""
        for form, rejection in refusals:
            named = bool(CONSTRAINT_WORDS.search(rejection.body))
            if self.constraint_support[form] is True and named:
                if constraint.name not in self._refused_tools[form]:
                    self._refused_tools[form].add(constraint.name)
                    log.warning(
                        "world model server %s refused the constraint of %s as %s (%s); %s",
                        self.url,
                        constraint.name,
                        form_field(form, dialect),
                        excerpt_of(rejection.body),
                        TOOL_FALLBACKS[form],
                    )
            elif self.constraint_support[form] is not False:
                self.constraint_support[form] = False
                log.warning(
                    "world model server %s does not accept %s (HTTP %d: %s); %s",
                    self.url,
                    form_field(form, dialect),
                    rejection.status,
                    excerpt_of(rejection.body),
                    SERVER_FALLBACKS[form],
                )

    async def _generate(
        self, body: dict[str, Any], on_progress: ProgressCallback | None, deadline: float, limit: int
    ) -> Generation:
        attempts = self.retries + 1
        last_reason = "no attempt made"
        attempt = 0
        for attempt in range(1, attempts + 1):
            try:
                with anyio.fail_after(max(deadline - time.monotonic(), 0.0)):
                    generation = await self._attempt(body, on_progress, limit)
            except TimeoutError:
                raise BackendError(
                    f"world model server {self.url} gave no complete answer within timeout_s={self.timeout_s:g} s "
                    f"({attempt} attempt(s)); last error before: {last_reason}"
                ) from None
            except Retryable as failure:
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

    async def _attempt(
        self, body: dict[str, Any], on_progress: ProgressCallback | None, limit: int
    ) -> Generation:
        constrained = not CONSTRAINT_FIELDS.isdisjoint(body)
        try:
            async with self._client.stream(
                "POST", self._raw_url, json=body, headers=self._headers(), timeout=self.timeout
            ) as response:
                if response.status_code != 200:
                    await self._raise_for_status(response, constrained)
                content_type = response.headers.get("content-type", "")
                if "text/event-stream" in content_type:
                    lines = body_lines(
                        body_pieces(response), wire_limit(limit), lambda: self._line_too_long(limit)
                    )
                    async with aclosing(lines):
                        acc = await self._read_stream(lines, on_progress, limit)
                else:
                    raw, cut = await read_limited(body_pieces(response), wire_limit(limit))
                    if cut:
                        raise AnswerTooLarge(
                            self._source, limit, f"a response body of more than {wire_limit(limit):,} bytes"
                        )
                    acc = self._read_whole(raw, limit)
        except StreamError as error:
            # SGLang answers a grammar it cannot compile with HTTP 200 and then an error chunk: a refusal as well.
            if constrained and CONSTRAINT_WORDS.search(error.message):
                status = error.code if isinstance(error.code, int) and 400 <= error.code < 600 else 400
                rejected = f"world model server {self.url} rejected the request: {error.reason}"
                raise _Rejected(rejected, status, error.message[:MAX_CHECKED_BODY]) from None
            raise
        except httpx.UnsupportedProtocol as error:
            detail = redact_text(str(error), self._raw_url)
            raise BackendError(f"world model URL {self.url} is not usable: {detail}") from None
        except httpx.TransportError as error:  # connect/read errors, timeouts, dropped connections
            detail = redact_text(str(error) or "no detail", self._raw_url)
            raise Retryable(f"{type(error).__name__}: {detail}") from None
        if on_progress is not None:
            await on_progress(acc.tokens, "done")
        return Generation(
            text=redact_secrets(acc.content),  # a server echoing its request's headers into the answer
            reasoning=redact_secrets(acc.reasoning),
            finish_reason=acc.finish_reason,
            prompt_tokens=acc.prompt_tokens,
            completion_tokens=acc.completion_tokens,
        )

    @property
    def _source(self) -> str:
        return f"world model server {self.url}"

    def _line_too_long(self, limit: int) -> AnswerTooLarge:
        return AnswerTooLarge(
            self._source,
            limit,
            f"a stream line of more than {wire_limit(limit):,} bytes (reading stopped there)",
        )

    async def _raise_for_status(self, response: httpx.Response, constrained: bool) -> None:
        status = response.status_code
        head, _ = await read_limited(body_pieces(response), ERROR_BODY_BYTES)
        text = redact_secrets(head.decode("utf-8", errors="replace"))
        excerpt = excerpt_of(text)
        reason = f"HTTP {status}: {excerpt or '(empty body)'}"
        # A server error that names the constraint is the server failing on it every time (llama-cpp-python answers
        # a response_format it cannot parse with HTTP 500): a refusal, like a 400.
        blames_constraint = constrained and bool(CONSTRAINT_WORDS.search(text[:MAX_CHECKED_BODY]))
        if status == 429 or (status >= 500 and not blames_constraint):
            raise Retryable(reason, retry_after_seconds(response.headers.get("retry-after")))
        # Other 4xx (bad request, auth, unknown model) will fail the same way every time.
        raise _Rejected(
            f"world model server {self.url} rejected the request: {reason}", status, text[:MAX_CHECKED_BODY]
        )

    async def _read_stream(
        self, lines: AsyncIterator[str], on_progress: ProgressCallback | None, limit: int
    ) -> Accumulator:
        acc = Accumulator()
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
                raise Retryable(f"malformed stream chunk {excerpt_of(data)!r}: {error}") from error
            self._apply_chunk(chunk, acc)
            if acc.answer_bytes > limit:
                raise AnswerTooLarge(
                    self._source,
                    limit,
                    f"at least {acc.answer_bytes:,} bytes of answer (reading stopped there)",
                )
            if on_progress is not None and time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                last_report = time.monotonic()
                await on_progress(acc.tokens, "answering" if acc.answering else "thinking")
        if not done and acc.finish_reason is None:
            raise Retryable(f"stream ended after {acc.chunks} chunk(s) without finishing")
        return acc

    def _apply_chunk(self, chunk: Any, acc: Accumulator) -> None:
        if not isinstance(chunk, dict):
            raise Retryable(f"unexpected stream chunk {excerpt_of(json.dumps(chunk))}")
        if "error" in chunk:  # vLLM and SGLang report failures after the 200 header as an error chunk
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise StreamError(str(message), error.get("code") if isinstance(error, dict) else None)
        acc.add_usage(chunk.get("usage"))
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise Retryable(
                f"malformed stream chunk (choices is not a list): {excerpt_of(json.dumps(chunk))}"
            )
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(choice, dict) or not isinstance(delta or {}, dict):
                raise Retryable(f"malformed stream chunk: {excerpt_of(json.dumps(chunk))}")
            if choice.get("index", 0) != 0:
                continue
            delta = delta or {}
            reasoning = reasoning_of(delta)
            content = delta.get("content") or ""
            if not isinstance(reasoning, str) or not isinstance(content, str):
                raise Retryable(
                    f"malformed stream chunk (text is not a string): {excerpt_of(json.dumps(chunk))}"
                )
            if reasoning or content:
                acc.chunks += 1
            acc.add_text(reasoning, content)
            if choice.get("finish_reason"):
                acc.finish_reason = choice["finish_reason"]

    def _read_whole(self, raw: bytes, limit: int) -> Accumulator:
        text = utf8_text(raw)
        try:
            completion = json.loads(text)
        except json.JSONDecodeError as error:
            raise Retryable(f"response is not JSON: {excerpt_of(text)!r}") from error
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not choices:
            raise Retryable(f"response has no choices: {excerpt_of(text)!r}")
        first = choices[0] if isinstance(choices, list) else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict) or not all(
            isinstance(message.get(k) or "", str) for k in ("content", "reasoning_content", "reasoning")
        ):
            raise Retryable(f"malformed response (no choices[0].message with text): {excerpt_of(text)!r}")
        acc = Accumulator(finish_reason=choices[0].get("finish_reason"))
        acc.add_text(reasoning_of(message), message.get("content") or "")
        if acc.answer_bytes > limit:
            raise AnswerTooLarge(self._source, limit, f"an answer of {acc.answer_bytes:,} bytes")
        acc.add_usage(completion.get("usage"))  # type: ignore[union-attr]
        acc.chunks = 1 if acc.content_parts or acc.reasoning_parts else 0
        return acc

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
