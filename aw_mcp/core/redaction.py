"""Secrets out of texts: URL credentials and the API key, wherever a server could echo them.

A model server's error body may quote the request's `Authorization` header (some proxies and debug servers do), and
httpx's messages quote the URL; both end up in the agent's error text, logs and the trajectory. Backends register the
key they send (`register_secret`), the HTTP server its `--auth-token`; `redact_secrets` replaces every registered
secret, and `AW_API_KEY` itself, with `***`: as is, JSON-escaped, percent-encoded and in base64 (standard or
URL-safe, at any alignment inside a longer base64 text, such as an echoed `Authorization: Basic` header). Keys
shorter than MIN_SECRET_CHARS are left alone: replacing "EMPTY" (vLLM's placeholder key) or a one-letter key
everywhere would garble texts and protect nothing.

URL credentials are `user:password@` and query parameters named like a key (`?api_key=`, `token`, `sig`, ...,
QUERY_SECRET_NAMES): `redact_url` masks them, `url_secrets` names them for `register_secret`.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit, urlunsplit

from aw_mcp.core.settings import SettingsError, read_settings

MIN_SECRET_CHARS = 8
MASK = "***"

_secrets: set[str] = set()
_lock = threading.Lock()


QUERY_SECRET_NAMES = re.compile(
    r"(?i)(api[-_]?key|apikey|key|access[-_]?token|token|auth|authorization|password|passwd|secret|"
    r"client[-_]?secret|sig|signature|x-api-key|code)"
)
_QUERY_PAIR = re.compile(r"(?P<name>[^&=#]+)=(?P<value>[^&#]*)")


def _mask_query(query: str) -> str:
    def mask(match: re.Match[str]) -> str:
        if QUERY_SECRET_NAMES.fullmatch(match.group("name")) and match.group("value"):
            return f"{match.group('name')}={MASK}"
        return match.group(0)

    return _QUERY_PAIR.sub(mask, query)


def redact_url(url: str) -> str:
    """The URL without `user:password@` or a key in its query (credentials must not reach error texts, logs or
    trajectories)."""
    try:
        parts = urlsplit(url)
        username, password, port = parts.username, parts.password, parts.port
    except ValueError:  # an unparsable port or host: keep nothing that could hold credentials
        rest = url.split("@")[-1] if "@" in url else url
        head, question, query = rest.partition("?")
        return head + question + _mask_query(query)
    query = _mask_query(parts.query)
    if username is None and password is None:
        netloc = parts.netloc
    else:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{MASK}@{host}" + (f":{port}" if port else "")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: its password and user name, and its query's key-like values."""
    try:
        parts = urlsplit(url)
        found = [parts.password, parts.username]
    except ValueError:
        return []
    found += [value for name, value in parse_qsl(parts.query) if QUERY_SECRET_NAMES.fullmatch(name)]
    return [secret for secret in found if secret]


def redact_text(text: str, url: str) -> str:
    """`text` with the credentials of `url` removed wherever they appear (httpx messages quote the URL)."""
    secrets = url_secrets(url)
    if not secrets:
        return text
    text = text.replace(url, redact_url(url))
    for secret in sorted(secrets, key=len, reverse=True):
        for form in secret_forms(secret):
            text = text.replace(form, MASK)
    return text


def register_secret(value: str | None) -> None:
    """Redact `value` from now on (a backend calls this with the key it sends)."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _secrets.add(value)


def known_secrets() -> list[str]:
    """The registered secrets and AW_API_KEY, longest first (so a key that contains another goes whole)."""
    with _lock:
        found = set(_secrets)
    try:
        env_key = read_settings().api_key_value
    except SettingsError:  # another variable is bad: the process stops on it; the key it sends is registered
        env_key = None
    if env_key and len(env_key) >= MIN_SECRET_CHARS:
        found.add(env_key)
    return sorted(found, key=len, reverse=True)


def _base64_cores(data: bytes) -> list[str]:
    """What every base64 text holding `data` contains, whatever the bytes before it: for each of the three
    alignments, the characters that encode only `data`'s bytes (a few bits at each end are shared with the
    neighbours and cannot be known); plus the whole encoding of `data` alone, padded."""
    cores = [base64.b64encode(data).decode()]
    for before in range(3):
        encoded = base64.b64encode(b"\0" * before + data).decode()
        first = -(-before // 3) * 4  # the first group made only of data's bytes
        last = (before + len(data)) // 3 * 4  # the end of the last such group
        if last - first >= MIN_SECRET_CHARS:
            cores.append(encoded[first:last])
    return cores


@functools.lru_cache(maxsize=256)
def secret_forms(secret: str) -> tuple[str, ...]:
    """The spellings of a secret a server may echo: as is, JSON-escaped, percent-encoded, base64 (standard and
    URL-safe); longest first."""
    forms = {secret, json.dumps(secret, ensure_ascii=False)[1:-1], quote(secret, safe=""), quote_plus(secret)}
    forms.add(quote(secret, safe="").replace("%", "%25"))  # encoded twice, as a URL inside a URL
    forms |= {form.lower() for form in list(forms) if "%" in form}
    for core in _base64_cores(secret.encode("utf-8", "surrogatepass")):
        forms |= {core, core.rstrip("="), core.replace("+", "-").replace("/", "_").rstrip("=")}
    return tuple(sorted((f for f in forms if len(f) >= MIN_SECRET_CHARS), key=len, reverse=True))


def redact_secrets(text: str) -> str:
    """`text` with every known secret (in each of its `secret_forms`) replaced by `***`."""
    for secret in known_secrets():
        for form in secret_forms(secret):
            if form in text:
                text = text.replace(form, MASK)
    return text
