"""`kvscope dashboards import` against a small stand-in for Grafana's HTTP API.

No Grafana server can run here, so an aiohttp app implements exactly the endpoints that
grafana-client calls for an import — GET /api/folders, POST /api/folders and
POST /api/dashboards/db — with Grafana's documented answers: 401 for a bad token, 412
(`version-mismatch`) when a dashboard uid exists and `overwrite` is false. The real
grafana-client and niquests do the talking, on a real socket.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import socket
import threading
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from dashboards import cli
from dashboards.generate import build_all
from tests.support.paths import ROOT

TOKEN = "glsa_kvscope-test-token-0123456789abcdef"


@dataclass
class FakeGrafana:
    """Grafana's folder and dashboard state plus a log of what was asked of it."""

    token: str
    url: str = ""
    folders: list[dict] = field(default_factory=list)
    dashboards: dict[str, dict] = field(default_factory=dict)  # uid -> stored record
    posts: list[dict] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    echo_auth_on_error: bool = False  # a misbehaving proxy that echoes the header back
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    @web.middleware
    async def auth(self, request: web.Request, handler):
        self.requests.append((request.method, request.path))
        header = request.headers.get("Authorization", "")
        if self.echo_auth_on_error:
            return web.json_response({"message": f"upstream rejected header {header!r}"}, status=502)
        if header != f"Bearer {self.token}":
            return web.json_response({"message": "invalid API key"}, status=401)
        return await handler(request)

    async def list_folders(self, request: web.Request) -> web.Response:
        return web.json_response(
            [{"id": f["id"], "uid": f["uid"], "title": f["title"]} for f in self.folders]
        )

    async def create_folder(self, request: web.Request) -> web.Response:
        body = await request.json()
        if any(f["title"] == body["title"] for f in self.folders):
            return web.json_response({"message": "a folder with the same name already exists"}, status=409)
        folder = {
            "id": next(self._ids),
            "uid": body.get("uid") or f"f{len(self.folders) + 1}x",
            "title": body["title"],
        }
        self.folders.append(folder)
        return web.json_response({**folder, "url": f"/dashboards/f/{folder['uid']}/", "version": 1})

    async def save_dashboard(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.posts.append(body)
        model = body["dashboard"]
        folder_uid = body.get("folderUid", "")
        if folder_uid and not any(f["uid"] == folder_uid for f in self.folders):
            return web.json_response({"message": "folder not found"}, status=400)
        existing = self.dashboards.get(model["uid"])
        if existing and not body.get("overwrite"):
            return web.json_response(
                {"message": "The dashboard has been changed by someone else", "status": "version-mismatch"},
                status=412,
            )
        version = existing["version"] + 1 if existing else 1
        self.dashboards[model["uid"]] = {"model": model, "folderUid": folder_uid, "version": version}
        return web.json_response(
            {
                "id": next(self._ids),
                "uid": model["uid"],
                "status": "success",
                "url": f"/d/{model['uid']}/slug",
                "version": version,
                "slug": "slug",
            }
        )

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_get("/api/folders", self.list_folders)
        app.router.add_post("/api/folders", self.create_folder)
        app.router.add_post("/api/dashboards/db", self.save_dashboard)
        return app


@pytest.fixture
def grafana():
    """A FakeGrafana served on a free 127.0.0.1 port by its own event-loop thread (the
    client under test is synchronous, so the server cannot share its thread)."""
    fake = FakeGrafana(token=TOKEN)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(fake.app())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{port}"
    yield fake
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kvscope")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dashboards", *argv])
    return args.func(args)


@pytest.fixture
def env_token(monkeypatch):
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)


def test_import_creates_folder_and_posts_both_dashboards(grafana, env_token, capsys):
    assert run(["import", "--grafana-url", grafana.url, "--folder", "LLM serving"]) == 0
    assert [f["title"] for f in grafana.folders] == ["LLM serving"]
    assert ("POST", "/api/folders") in grafana.requests
    folder_uid = grafana.folders[0]["uid"]
    expected = build_all()
    assert set(grafana.dashboards) == {m["uid"] for m in expected.values()}
    for model in expected.values():
        stored = grafana.dashboards[model["uid"]]
        assert stored["folderUid"] == folder_uid
        assert stored["model"] == {**model, "id": None}
    assert all(post["overwrite"] is False for post in grafana.posts)
    out = capsys.readouterr().out
    assert f"{grafana.url}/d/kvscope-overview/slug" in out and "LLM serving" in out


def test_existing_folder_is_reused(grafana, env_token):
    grafana.folders.append({"id": 99, "uid": "existing", "title": "kvscope"})
    assert run(["import", "--grafana-url", grafana.url]) == 0  # default folder: kvscope
    assert ("POST", "/api/folders") not in grafana.requests
    assert {d["folderUid"] for d in grafana.dashboards.values()} == {"existing"}


def test_general_folder_posts_without_folder_uid(grafana, env_token):
    assert run(["import", "--grafana-url", grafana.url, "--folder", "General"]) == 0
    assert grafana.folders == [] and ("GET", "/api/folders") not in grafana.requests
    assert all("folderUid" not in post for post in grafana.posts)


def test_second_import_needs_overwrite(grafana, env_token, capsys):
    assert run(["import", "--grafana-url", grafana.url]) == 0
    capsys.readouterr()
    assert run(["import", "--grafana-url", grafana.url]) == 1
    err = capsys.readouterr().err
    assert "--overwrite" in err and "kvscope-overview" in err and "kvscope-vllm-native" in err
    assert {d["version"] for d in grafana.dashboards.values()} == {1}  # untouched
    assert len(grafana.folders) == 1  # the folder was found, not created twice

    assert run(["import", "--grafana-url", grafana.url, "--overwrite"]) == 0
    assert {d["version"] for d in grafana.dashboards.values()} == {2}
    assert grafana.posts[-1]["overwrite"] is True


def _assert_secret_free(capsys, caplog, secret: str = TOKEN) -> str:
    captured = capsys.readouterr()
    text = captured.out + captured.err + caplog.text
    assert secret not in text
    return captured.err


def test_bad_token_gives_clear_error_without_leaking_it(grafana, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "glsa_wrong-token-fedcba9876543210"
    monkeypatch.setenv("GRAFANA_TOKEN", wrong)
    assert run(["import", "--grafana-url", grafana.url]) == 1
    err = _assert_secret_free(capsys, caplog, wrong)
    assert "401" in err and "GRAFANA_TOKEN" in err
    assert grafana.dashboards == {}


def test_token_never_printed_even_when_the_server_echoes_it(grafana, env_token, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    grafana.echo_auth_on_error = True
    assert run(["import", "--grafana-url", grafana.url]) == 1
    err = _assert_secret_free(capsys, caplog)
    assert "502" in err and "***" in err


def test_token_file_takes_precedence_and_is_stripped(grafana, monkeypatch, tmp_path, capsys, caplog):
    monkeypatch.setenv("GRAFANA_TOKEN", "glsa_stale-env-token")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert run(["import", "--grafana-url", grafana.url, "--token-file", str(token_file)]) == 0
    _assert_secret_free(capsys, caplog)


def test_missing_or_empty_credentials_fail_before_any_request(grafana, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    assert run(["import", "--grafana-url", grafana.url]) == 1
    assert "GRAFANA_TOKEN" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert run(["import", "--grafana-url", grafana.url, "--token-file", str(empty)]) == 1
    assert "is empty" in capsys.readouterr().err
    assert grafana.requests == []


def test_unreachable_grafana_is_a_clear_error(env_token, capsys, caplog):
    port = just_freed_port()
    assert run(["import", "--grafana-url", f"http://127.0.0.1:{port}", "--timeout", "5"]) == 1
    err = _assert_secret_free(capsys, caplog)
    assert f"cannot reach Grafana at http://127.0.0.1:{port}" in err


def test_export_writes_the_committed_files(tmp_path):
    assert run(["export", str(tmp_path / "out")]) == 0
    for name in ("kvscope-overview.json", "vllm-native.json"):
        committed = (ROOT / "dashboards" / "json" / name).read_text()
        assert (tmp_path / "out" / name).read_text() == committed


def just_freed_port() -> int:
    """A loopback port that was free a moment ago: nothing listens, so connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
