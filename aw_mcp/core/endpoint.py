"""A server's endpoint under a base URL: `endpoint("http://h:8000/v1?api_key=K", "models")` is
`http://h:8000/v1/models?api_key=K`. Pasting the path after the whole base URL put it inside the query
(`...?api_key=K/models`), a malformed request URL."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def endpoint(base_url: str, path: str, *, drop_suffix: str = "") -> str:
    """`path` appended to the base URL's path (its query and fragment kept where they belong). `drop_suffix`:
    a last path segment to remove first (`/v1`, for a server's `/version` beside its API)."""
    parts = urlsplit(base_url)
    base_path = parts.path.rstrip("/")
    if drop_suffix:
        base_path = base_path.removesuffix(drop_suffix)
    return urlunsplit(
        (parts.scheme, parts.netloc, f"{base_path}/{path.lstrip('/')}", parts.query, parts.fragment)
    )
