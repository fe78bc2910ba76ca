"""Which redirects a scrape follows (`--follow-redirects`), like Prometheus's follow_redirects
with a safer default.

- `same-origin` (default): only to the target's own scheme, host and port (a path moved,
  `/metrics` -> `/metrics/`); anywhere else is refused.
- `none`: no redirect is followed.
- `any`: every redirect, up to `MAX_REDIRECTS`; the Authorization header is dropped once
  a hop leaves the target's origin, so credentials never reach another host.

A refused redirect is a scrape error (`redirect`) whose detail shows the location with any
password redacted. Credentials written into a Location are never used. Stdlib only.
"""

from __future__ import annotations

import urllib.parse
from typing import Literal

RedirectPolicy = Literal["same-origin", "none", "any"]
POLICIES: tuple[str, ...] = ("same-origin", "none", "any")
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


def resolve(current: str, location: str) -> str:
    """The absolute URL a Location points to, without any userinfo it carries."""
    parts = urllib.parse.urlsplit(urllib.parse.urljoin(current, location))
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], fragment=""))


def refusal(policy: RedirectPolicy, target_url: str, next_url: str) -> str | None:
    """Why `next_url` may not be followed from a scrape of `target_url`, or None."""
    if policy == "none":
        return "redirects are not followed (--follow-redirects none)"
    scheme = urllib.parse.urlsplit(next_url).scheme.lower()
    if scheme not in ("http", "https"):
        return f"redirect to a {scheme or 'schemeless'} URL"
    if policy == "same-origin" and origin(next_url) != origin(target_url):
        return "redirect to another scheme, host or port (--follow-redirects same-origin)"
    return None
