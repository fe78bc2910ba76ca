"""Open an HTML file in headless Chromium over the DevTools protocol and report what it saw.

Why CDP and not `--dump-dom`: the DOM dump cannot say whether an <img> *decoded*, and
console messages in `--enable-logging` output are version-dependent. Here a tiny client
(aiohttp websockets) enables Runtime, Log and Page, loads the file, waits for `load`, asks
every image to `decode()`, and collects console calls, uncaught exceptions and log entries
(CSP violations, failed loads) at level error or warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.prometheus import stop_process

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]

IMAGES_JS = """
Promise.all(Array.from(document.images).map(img => img.decode().then(
  () => ({alt: img.alt, ok: true, w: img.naturalWidth, h: img.naturalHeight,
          data: img.src.startsWith('data:image/png;base64,')}),
  () => ({alt: img.alt, ok: false, w: img.naturalWidth, h: img.naturalHeight,
          data: img.src.startsWith('data:image/png;base64,')}))))
"""


@dataclass
class PageReport:
    images: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, error log entries
    warnings: list[str] = field(default_factory=list)
    scripts: int = -1
    text: str = ""


class _Cdp:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.next_id, self.events, self.pending = ws, 0, [], {}

    async def pump(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})


def _classify(events: list[dict[str, Any]], report: PageReport) -> None:
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            (
                report.errors
                if p.get("type") in ("error", "assert")
                else report.warnings
                if p.get("type") == "warning"
                else []
            ).append(f"console.{p.get('type')}: {text}")
        elif m == "Runtime.exceptionThrown":
            report.errors.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
        elif m == "Log.entryAdded":
            entry = p.get("entry", {})
            bucket = (
                report.errors
                if entry.get("level") == "error"
                else report.warnings
                if entry.get("level") == "warning"
                else None
            )
            if bucket is not None:
                bucket.append(f"log[{entry.get('source')}]: {entry.get('text')}")


async def _inspect(port: int, url: str) -> PageReport:
    report = PageReport()
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            pages = [t for t in await resp.json() if t.get("type") == "page"]
        async with session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = _Cdp(ws)
            pump = asyncio.create_task(cdp.pump())
            for domain in ("Runtime", "Log", "Page"):
                await cdp.call(f"{domain}.enable")
            await cdp.call("Page.navigate", url=url)
            deadline = time.monotonic() + 30
            while (
                not any(e["method"] == "Page.loadEventFired" for e in cdp.events)
                and time.monotonic() < deadline
            ):
                await asyncio.sleep(0.05)
            res = await cdp.call(
                "Runtime.evaluate", expression=IMAGES_JS, awaitPromise=True, returnByValue=True
            )
            report.images = res["result"]["value"]
            res = await cdp.call("Runtime.evaluate", expression="document.scripts.length", returnByValue=True)
            report.scripts = res["result"]["value"]
            res = await cdp.call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)
            report.text = res["result"]["value"]
            await asyncio.sleep(0.3)  # late console messages
            pump.cancel()
    _classify(cdp.events, report)
    return report


def open_in_chromium(path: Path, timeout_s: float = 60.0) -> PageReport:
    """Load `path` in a fresh headless Chromium profile and return what the page did."""
    profile = tempfile.mkdtemp(prefix="kvscope-chromium-")
    # Its own session: Chromium's helpers (renderer, crashpad) outlive a stopped main process
    # and still write into the profile, so the whole group is stopped before it is removed.
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not (port_file.exists() and port_file.read_text().strip()) and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {proc.returncode}")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        return asyncio.run(asyncio.wait_for(_inspect(port, path.resolve().as_uri()), timeout_s))
    finally:
        stop_process(proc, 10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _remove_profile(profile)


def _remove_profile(profile: str) -> None:
    """A helper killed a moment ago may still have a file open: try again briefly."""
    for _ in range(20):
        if not os.path.exists(profile):
            return
        try:
            shutil.rmtree(profile)
        except OSError:
            time.sleep(0.1)
    shutil.rmtree(profile, ignore_errors=True)
