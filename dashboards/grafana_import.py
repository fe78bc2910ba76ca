"""Import the generated dashboards into a running Grafana over its HTTP API.

Uses the maintained `grafana-client` library (niquests underneath), which calls
`GET /api/folders` and `POST /api/folders` for the folder and `POST /api/dashboards/db`
for each dashboard. The same JSON that file provisioning reads is posted with `id: null`
and its stable uid, so importing twice updates rather than duplicates.

Credentials: a service-account token from `--token-file` or `GRAFANA_TOKEN`, or
`user:password@` in the URL (Grafana's basic auth). No secret is ever printed: every message
that leaves this module passes through `Redactor`, including error text that Grafana (or a
proxy in front of it) sends back, which could echo the Authorization header.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dashboards.panels import JSON

TOKEN_ENV = "GRAFANA_TOKEN"
IMPORT_MESSAGE = "kvscope dashboards import"


class DashboardImportError(Exception):
    """A failure explained in words a user can act on; the text is already redacted."""


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces every secret in a text by `***` (longest first, so a token that contains
    another secret is still removed whole)."""

    secrets: tuple[str, ...]

    def __call__(self, text: object) -> str:
        out = str(text)
        for secret in sorted((s for s in self.secrets if s), key=len, reverse=True):
            out = out.replace(secret, "***")
        return out


@dataclass(frozen=True, slots=True)
class GrafanaTarget:
    """Where to import and with which credential; `display_url` is safe to print."""

    url: str
    display_url: str
    token: str | None
    redact: Redactor


def read_token(token_file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The token from `token_file` (preferred: explicit beats ambient) or `GRAFANA_TOKEN`.

    Surrounding whitespace is stripped (files usually end in a newline). The token itself
    never appears in an error message; only the file's path does.
    """
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise DashboardImportError(f"cannot read token file {token_file}: {exc.strerror}") from None
        if not token:
            raise DashboardImportError(f"token file {token_file} is empty")
        return token
    return environ.get(TOKEN_ENV, "").strip() or None


def resolve_target(
    url: str, token_file: Path | None, environ: Mapping[str, str] | None = None
) -> GrafanaTarget:
    """Parse the URL, pick the credential and build the redactor for both."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DashboardImportError("--grafana-url must look like http://host:3000 (or https://...)")
    token = read_token(token_file, os.environ if environ is None else environ)
    if token is None and not (parts.username and parts.password):
        raise DashboardImportError(
            f"no Grafana credentials: set {TOKEN_ENV}, pass --token-file, or put user:password@ in the URL"
        )
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    # grafana-client appends "api" to the URL path without a separator: a Grafana served
    # under /grafana must be given as /grafana/, or requests go to /grafanaapi/...
    path = parts.path if parts.path.endswith("/") or not parts.path else parts.path + "/"
    display = urlunsplit((parts.scheme, netloc, path, "", "")).rstrip("/")
    secrets = tuple(s for s in (token, parts.password) if s)
    return GrafanaTarget(
        url=urlunsplit((parts.scheme, parts.netloc, path, parts.query, "")),
        display_url=display,
        token=token,
        redact=Redactor(secrets),
    )


def _client(target: GrafanaTarget, timeout: float):
    try:
        from grafana_client import GrafanaApi, TokenAuth
    except ImportError:
        raise DashboardImportError(
            "grafana-client is not installed: pip install 'kvscope[harness]'"
        ) from None
    credential = TokenAuth(target.token) if target.token else None
    return GrafanaApi.from_url(target.url, credential=credential, timeout=timeout)


def ensure_folder(api, title: str | None) -> str | None:
    """The uid of the folder titled `title`, created if missing; None for the root
    ("General") folder, which the folder API does not list."""
    if not title or title.strip().lower() == "general":
        return None
    for folder in api.folder.get_all_folders():
        if folder.get("title") == title:
            return folder["uid"]
    return api.folder.create_folder(title)["uid"]


def _payload(model: JSON, folder_uid: str | None, overwrite: bool) -> JSON:
    payload: JSON = {"dashboard": {**model, "id": None}, "overwrite": overwrite, "message": IMPORT_MESSAGE}
    if folder_uid:
        payload["folderUid"] = folder_uid
    return payload


def _explain(exc: Exception, target: GrafanaTarget) -> str:
    """One sentence for a grafana-client or transport error (not yet redacted)."""
    from grafana_client.client import (
        GrafanaClientError,
        GrafanaServerError,
        GrafanaTimeoutError,
        GrafanaUnauthorizedError,
    )

    where = target.display_url
    if isinstance(exc, GrafanaUnauthorizedError):
        return (
            f"Grafana at {where} rejected the credentials (401 Unauthorized): check "
            f"{TOKEN_ENV} / --token-file, and that the token has not expired"
        )
    if isinstance(exc, GrafanaClientError) and exc.status_code == 403:
        return (
            f"Grafana at {where} refused the request (403 Forbidden): the token needs the "
            f"Editor role (folders:create, dashboards:write)"
        )
    if isinstance(exc, GrafanaTimeoutError):
        return f"Grafana at {where} did not answer in time"
    if isinstance(exc, GrafanaServerError | GrafanaClientError):
        return f"Grafana at {where} answered {exc.status_code}: {exc.message}"
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    return f"cannot reach Grafana at {where}: {errno.group(1) if errno else type(exc).__name__}"


@dataclass(frozen=True, slots=True)
class Imported:
    name: str
    uid: str
    url: str
    version: int | None


def import_dashboards(
    target: GrafanaTarget,
    dashboards: Mapping[str, JSON],
    *,
    folder: str | None,
    overwrite: bool,
    timeout: float,
) -> list[Imported]:
    """Create `folder` if needed and post every dashboard into it.

    Without `overwrite`, a dashboard whose uid already exists is left untouched (Grafana
    answers 412) and reported together with the others at the end; with it, the existing
    one is replaced. Credential, permission and connection errors stop at the first request.
    """
    from grafana_client.client import GrafanaClientError, GrafanaException
    from niquests.exceptions import RequestException

    api = _client(target, timeout)
    done: list[Imported] = []
    exists: list[str] = []
    try:
        folder_uid = ensure_folder(api, folder)
        for name, model in dashboards.items():
            try:
                answer = api.dashboard.update_dashboard(_payload(model, folder_uid, overwrite))
            except GrafanaClientError as exc:
                if exc.status_code != 412:
                    raise
                exists.append(f"{model['uid']} ({target.redact(exc.message)})")
                continue
            done.append(
                Imported(
                    name=name,
                    uid=answer.get("uid", model["uid"]),
                    url=target.display_url + answer.get("url", f"/d/{model['uid']}"),
                    version=answer.get("version"),
                )
            )
    except (GrafanaException, RequestException, OSError) as exc:
        raise DashboardImportError(target.redact(_explain(exc, target))) from None
    if exists:
        raise DashboardImportError(
            "already in Grafana, left unchanged: "
            + "; ".join(exists)
            + ". Rerun with --overwrite to replace them"
            + (f" (imported: {', '.join(d.uid for d in done)})" if done else "")
        )
    return done
