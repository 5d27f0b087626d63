"""Secrets out of texts: URL credentials and the API key, wherever a server could echo them.

A model server's error body may quote the request's `Authorization` header (some proxies and debug servers do), and
httpx's messages quote the URL; both end up in the agent's error text, logs and the trajectory. Backends register the
key they send (`register_secret`); `redact_secrets` replaces every registered key, and `AW_API_KEY` itself, with
`***`. Keys shorter than MIN_SECRET_CHARS are left alone: replacing "EMPTY" (vLLM's placeholder key) or a one-letter
key everywhere would garble texts and protect nothing.
"""

from __future__ import annotations

import json
import threading
from urllib.parse import urlsplit, urlunsplit

from aw_mcp.core.settings import SettingsError, read_settings

MIN_SECRET_CHARS = 8
MASK = "***"

_secrets: set[str] = set()
_lock = threading.Lock()


def redact_url(url: str) -> str:
    """The URL without `user:password@` (credentials must not reach error texts, logs or trajectories)."""
    try:
        parts = urlsplit(url)
        username, password, port = parts.username, parts.password, parts.port
    except ValueError:  # an unparsable port or host: keep nothing that could hold credentials
        return url.split("@")[-1] if "@" in url else url
    if username is None and password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{MASK}@{host}" + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redact_text(text: str, url: str) -> str:
    """`text` with the credentials of `url` removed wherever they appear (httpx messages quote the URL)."""
    try:
        parts = urlsplit(url)
        username, password = parts.username, parts.password
    except ValueError:
        return text
    if username is None and password is None:
        return text
    text = text.replace(url, redact_url(url))
    for secret in (password, username):
        if secret:
            text = text.replace(secret, MASK)
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


def redact_secrets(text: str) -> str:
    """`text` with every known secret (as is, and as JSON escapes it) replaced by `***`."""
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, MASK)
        escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
        if escaped != secret and escaped in text:
            text = text.replace(escaped, MASK)
    return text
