"""Target credentials (`--target-auth NAME=KIND:WHERE`) and URL redaction.

KIND is `bearer-file`, `bearer-env`, `basic-file` or `basic-env`; WHERE is a file path or an
environment variable name. A bearer secret is the token; a basic secret is `user:password`.
Files are read (first line, surrounding whitespace stripped) at every scrape, so a rotated
token is picked up without a restart, as Prometheus does with `credentials_file`. A URL's
`user:password@` is taken as basic auth too and stripped from the URL.

Invariants: a secret never appears in a repr, a log line, the JSON API or a scrape error;
`redact_url` is applied to every URL that is shown (a target's, a redirect's location).
Stdlib only.
"""

from __future__ import annotations

import base64
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import Literal

Scheme = Literal["basic", "bearer"]
Source = Literal["file", "env", "url"]
KINDS: tuple[str, ...] = ("bearer-file", "bearer-env", "basic-file", "basic-env")
REDACTED = "xxxxx"  # what Go's url.Redacted() (and so Prometheus) shows for a password


class CredentialError(ValueError):
    """A credential that cannot be read or is malformed; the message names where it lives,
    never what it holds."""


def read_secret_file(path: str) -> str:
    """The first line of `path`, stripped: a token kept in a file (a Kubernetes or Docker
    secret). Raises CredentialError naming the file, never what it holds."""
    try:
        with open(path, encoding="utf-8") as f:
            value = f.readline().strip()
    except OSError as e:
        raise CredentialError(f"cannot read {path}: {e.strerror or e}") from None
    if not value:
        raise CredentialError(f"{path} is empty")
    return value


@dataclass(frozen=True, slots=True)
class Credentials:
    scheme: Scheme
    source: Source
    where: str  # the file path or variable name; for "url" the user name
    secret: str | None = field(default=None, repr=False, compare=False)  # only for "url"

    def _read(self) -> str:
        if self.source == "url":
            return self.secret or ""
        if self.source == "env":
            value = os.environ.get(self.where)
            if value is None:
                raise CredentialError(f"environment variable {self.where} is not set")
            value = value.strip()
        else:
            return read_secret_file(self.where)
        if not value:
            raise CredentialError(f"{self.where} is empty")
        return value

    def header(self) -> str:
        """The Authorization header value, read now. Raises CredentialError."""
        secret = self._read()
        if self.scheme == "bearer":
            return f"Bearer {secret}"
        if self.source != "url" and ":" not in secret:
            raise CredentialError(f"{self.where} must hold user:password for basic auth")
        return "Basic " + base64.b64encode(secret.encode("utf-8")).decode("ascii")

    def describe(self) -> str:
        if self.source == "url":
            return f"basic auth for user {self.where!r} (from the URL)"
        what = "bearer token" if self.scheme == "bearer" else "basic auth"
        where = f"file {self.where}" if self.source == "file" else f"${self.where}"
        return f"{what} from {where}"


def parse_auth(spec: str) -> tuple[str, Credentials]:
    """`NAME=KIND:WHERE` -> (target name, Credentials); checks that the secret is readable
    now. Raises CredentialError with a message fit for the user."""
    name, sep, rest = spec.partition("=")
    kind, sep2, where = rest.partition(":")
    if not sep or not sep2 or not name.strip() or not where.strip() or kind not in KINDS:
        raise CredentialError(
            f"--target-auth {spec!r}: want NAME=KIND:WHERE with KIND one of {', '.join(KINDS)}, "
            "e.g. gpu-a=bearer-file:/run/secrets/token"
        )
    scheme, source = kind.split("-")
    creds = Credentials(scheme, source, where.strip())  # type: ignore[arg-type]
    try:
        creds.header()
    except CredentialError as e:
        raise CredentialError(f"--target-auth {name.strip()}: {e}") from None
    return name.strip(), creds


def split_userinfo(url: str) -> tuple[str, Credentials | None]:
    """(URL without `user:password@`, basic Credentials from it or None)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    creds = Credentials("basic", "url", user, f"{user}:{password}")
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), creds


def redact_url(url: str) -> str:
    """`url` with any password replaced by xxxxx; unparseable text is cut at its last '@'."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return url.rpartition("@")[2] if "@" in url else url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:{REDACTED}@{host}"))
