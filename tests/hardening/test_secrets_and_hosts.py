"""Issue 34, item 9: secrets and hosts. The key is redacted in every spelling a server may echo (base64 at any
alignment, URL-safe base64, percent-encoded), a `?api_key=` in the base URL too (and the request URL keeps it in
its query instead of pasting the path after it), the HTTP server's `--auth-token` as well; Host and Origin are parsed
as a host and a port; a redirect from `/models` at start-up is a clear error; bytes that are not UTF-8 in a streamed
answer are an error, as in a plain body."""

from __future__ import annotations

import base64
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import anyio
import httpx
import pytest

from aw_mcp.backends.openai import OpenAIWorldModel
from aw_mcp.backends.preflight import PreflightError, check_openai
from aw_mcp.core.model_io import BackendError, GenerationParams
from aw_mcp.core.redaction import MASK, redact_secrets, redact_url, register_secret
from aw_mcp.load.world import load_world_text
from aw_mcp.protocol.http_guard import HttpOptions
from aw_mcp.protocol.server import WorldApp, build_http_app
from aw_mcp.sim.simulator import Simulator
from aw_mcp.trajectory.records import CallRecord, TrajectoryWriter
from tests.conftest import SMALL_WORLD, ScriptedWorldModel, free_port, observation
from tests.hardening.test_http_protocol_backend import ACCEPT, INIT, http_world

KEY = "sk-test-Zq8+/Yw3ReDaCtMe-4711"
MESSAGES = [{"role": "user", "content": "hi"}]


def spellings(secret: str) -> list[str]:
    """How a server may echo a secret: in an `Authorization: Basic` header at each alignment, URL-safe base64,
    percent-encoded (once and twice), form-encoded."""
    raw = secret.encode()
    basic = [base64.b64encode(prefix.encode() + raw + b"!").decode() for prefix in ("", "u:", "us:", "use:")]
    return [
        *basic,
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        quote(secret, safe=""),
        quote(quote(secret, safe=""), safe=""),
        quote_plus(secret),
    ]


def leaks(text: str, secret: str) -> list[str]:
    """Each spelling of `secret` (or a 10-character run of its base64 core) still readable in `text`."""
    found = [form for form in spellings(secret) if form in text]
    core = base64.b64encode(secret.encode()).decode()[4:14]
    return found + ([core] if core in text else [])


def test_every_spelling_of_the_key_is_redacted() -> None:
    register_secret(KEY)
    text = " ".join(f"echo[{form}]" for form in spellings(KEY))
    cleaned = redact_secrets(text)
    assert not leaks(cleaned, KEY), cleaned
    assert cleaned.count(MASK) >= len(spellings(KEY))


def _model(base_url: str, answer: httpx.Response, seen: list[httpx.Request]) -> OpenAIWorldModel:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    return OpenAIWorldModel(base_url, "m", api_key=KEY, http_client=client, retries=0)


def test_a_query_key_in_the_base_url_stays_in_the_query_and_is_redacted() -> None:
    secret = "q-secret-778899"
    seen: list[httpx.Request] = []
    echo = f"bad key {secret} / {quote(secret)} / {base64.b64encode(secret.encode()).decode()}"
    model = _model(f"http://models.example/v1?api_key={secret}", httpx.Response(401, text=echo), seen)
    with pytest.raises(BackendError) as caught:
        anyio.run(model.generate, MESSAGES, GenerationParams(max_tokens=8))
    assert (
        str(seen[0].url) == f"http://models.example/v1/chat/completions?api_key={secret}"
    )  # was ...?api_key=K/chat
    message = str(caught.value)
    assert secret not in message and not leaks(message, secret), message
    assert (
        "api_key=***" in model.url
        and redact_url(f"http://h/?token={secret}&a=1") == "http://h/?token=***&a=1"
    )


def test_an_echoed_key_in_an_error_body_is_redacted_in_every_spelling() -> None:
    echo = "headers: " + " | ".join(spellings(KEY))
    model = _model("http://models.example/v1", httpx.Response(500, text=echo), [])
    with pytest.raises(BackendError) as caught:
        anyio.run(model.generate, MESSAGES, GenerationParams(max_tokens=8))
    assert not leaks(str(caught.value), KEY), str(caught.value)


def test_the_auth_token_is_redacted_once_the_server_has_it(tmp_path: Path) -> None:
    token = "tok-auth-0123456789"
    world = load_world_text(SMALL_WORLD)
    simulator = Simulator(world, ScriptedWorldModel(lambda *_: observation("x")))
    build_http_app(WorldApp(simulator, SMALL_WORLD), HttpOptions(port=free_port(), auth_token=token))
    writer = TrajectoryWriter(tmp_path / "t.jsonl")
    echo = f"Bearer {token} / {base64.b64encode(('x:' + token).encode()).decode()}"
    writer.write(CallRecord(world="w", session="s", index=0, tool="t", arguments={}, observation=echo))
    written = (tmp_path / "t.jsonl").read_text()
    assert token not in written and not leaks(written, token), written


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "localhost:1@evil.example"}, 421),
        ({"host": "localhost:"}, 421),
        ({"host": "localhost:http"}, 421),
        ({"host": "localhost"}, 200),  # port-less: was 421
        ({"host": "LocalHost:{port}"}, 200),
        ({"host": "127.0.0.1:{port}", "origin": "http://localhost:{port}.evil.example"}, 403),
        ({"host": "127.0.0.1:{port}", "origin": "http://user@localhost:{port}"}, 403),
        ({"host": "127.0.0.1:{port}", "origin": "http://LOCALHOST:{port}"}, 200),
    ],
)
async def test_host_and_origin_are_parsed_as_host_and_port(headers: dict[str, str], status: int) -> None:
    port = free_port()
    async with http_world(HttpOptions(port=port)) as (url, _):
        async with httpx.AsyncClient() as http:
            sent = {**ACCEPT, **{k: v.format(port=port) for k, v in headers.items()}}
            answer = await http.post(url, json=INIT, headers=sent)
    assert answer.status_code == status, answer.text


@pytest.mark.anyio
async def test_allowed_hosts_match_in_any_case_and_with_their_port() -> None:
    port = free_port()
    options = HttpOptions(
        host="0.0.0.0", port=port, auth_token="t", allowed_hosts=["MyBox.Example", "Other.Example:9"]
    )
    async with http_world(options) as (_, _simulator):
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx.AsyncClient() as http:
            auth = {**ACCEPT, "authorization": "Bearer t"}
            named = await http.post(url, json=INIT, headers={**auth, "host": f"mybox.EXAMPLE:{port}"})
            wrong_port = await http.post(url, json=INIT, headers={**auth, "host": "other.example:10"})
            right_port = await http.post(url, json=INIT, headers={**auth, "host": "OTHER.example:9"})
    assert named.status_code == 200 and right_port.status_code == 200
    assert wrong_port.status_code == 421


@pytest.fixture
def redirecting_server() -> Iterator[int]:
    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 -- the standard library's name
            self.send_response(301)
            self.send_header("Location", "https://models.example/v1/models?token=abcdef123456")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_a_redirect_from_models_at_start_up_is_a_clear_error(redirecting_server: int) -> None:
    with pytest.raises(PreflightError) as caught:
        check_openai(f"http://127.0.0.1:{redirecting_server}/v1", "m")
    message = str(caught.value)
    assert (
        "answered GET /models with a redirect (HTTP 301 to https://models.example/v1/models?token=***)"
        in message
    )
    assert "--base-url" in message and "abcdef123456" not in message


@pytest.mark.parametrize("streamed", [False, True])
def test_bytes_that_are_not_utf8_are_an_error_streamed_or_not(streamed: bool) -> None:
    if streamed:
        body = b'data: {"choices":[{"delta":{"content":"caf\xe9"}}]}\n\ndata: [DONE]\n\n'
        answer = httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    else:
        body = b'{"choices":[{"message":{"content":"caf\xe9"},"finish_reason":"stop"}]}'
        answer = httpx.Response(200, content=body, headers={"content-type": "application/json"})
    model = _model("http://models.example/v1", answer, [])
    with pytest.raises(BackendError, match=r"is not UTF-8 text \(byte 0xe9 at offset"):
        anyio.run(model.generate, MESSAGES, GenerationParams(max_tokens=8))
