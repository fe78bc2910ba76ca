"""Run the exporter sidecar from parsed CLI arguments until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import signal
import sys

from aiohttp import web

from exporter.app import make_app
from exporter.credentials import CredentialError, parse_auth
from exporter.dialects.probe import ProbeSettings
from exporter.runner import Exporter, Options
from exporter.scrape import Target, TargetError, parse_target, tls_context

log = logging.getLogger("kvscope.exporter")


def build_targets(specs: list[str], auth_specs: list[str] | None = None) -> list[Target]:
    """Validate `--target` and `--target-auth` values; raises TargetError (or CredentialError)
    with a message fit for the user, never showing a secret."""
    if not specs:
        raise TargetError("give at least one --target URL (e.g. --target http://127.0.0.1:8000/metrics)")
    targets = [parse_target(s) for s in specs]
    names = [t.name for t in targets]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise TargetError(f"duplicate target names {dupes}: give each one a name (NAME=URL)")
    by_name = {t.name: t for t in targets}
    for spec in auth_specs or []:
        name, creds = parse_auth(spec)
        target = by_name.get(name)
        if target is None:
            raise TargetError(
                f"--target-auth {name}: no target is named {name!r} (targets: {', '.join(names)})"
            )
        if target.credentials is not None:
            raise TargetError(
                f"--target-auth {name}: the target has credentials already (in its URL, or twice)"
            )
        by_name[name] = dataclasses.replace(target, credentials=creds)
    return [by_name[n] for n in names]


def _describe(t: Target) -> str:
    return f"{t.name}={t.url}" + (f" ({t.credentials.describe()})" if t.credentials else "")


async def _serve(exporter: Exporter, host: str, port: int, kv_events=None) -> None:
    app = make_app(exporter)
    if kv_events is not None:
        kv_events(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    names = ", ".join(_describe(s.target) for s in exporter.states)
    print(f"kvscope exporter on http://{host}:{port}/metrics scraping {names}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def kv_events_attacher(specs: list[str], exporter: Exporter, options: Options, targets: list[Target]):
    """None without --kv-events; else a function that adds the hub to the app. Raises
    KvEventsSpecError (a ValueError) for a bad value. `auto` asks the target where it
    publishes, now; what it finds is said here and kept in /api/v1/kv_events. pyzmq is
    imported only when used."""
    if not specs:
        return None
    from exporter.kv_events.hub import KvEventsHub
    from exporter.kv_events.lookup import scrape_lookup
    from exporter.kv_events.service import attach
    from exporter.kv_events.subscriptions import subscriptions

    sources, notes = subscriptions(
        specs, {t.name: t.url for t in targets}, {t.name: _authorization(t) for t in targets}
    )
    for note in notes:
        print(f"kvscope exporter: kv events: {note.text} [{note.code}]", file=sys.stderr, flush=True)
    names = {t.name for t in targets}
    for s in sources:
        if s.name not in names:
            print(
                f"kvscope exporter: warning: --kv-events {s.name} names no --target; "
                "its projected hit ratios need that target's prefix-cache counters",
                file=sys.stderr,
            )
    hub = KvEventsHub(sources, window_s=options.window, lookup=scrape_lookup(exporter), notes=notes)
    return lambda app: attach(app, hub, options.interval, options.record_dir)


def _authorization(target: Target) -> str | None:
    try:
        return target.credentials.header() if target.credentials is not None else None
    except CredentialError:
        return None  # the scrape reports it; discovery then asks without


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        targets = build_targets(args.target, args.target_auth)
    except (TargetError, CredentialError) as e:
        print(f"kvscope exporter: {e}", file=sys.stderr)
        return 2
    for t in targets:
        if t.credentials is not None and t.credentials.source == "url":
            log.warning(
                "target %s: a password in a URL is visible to other local users (ps); "
                "prefer --target-auth %s=basic-file:PATH",
                t.name,
                t.name,
            )
    options = Options(
        interval=args.interval,
        timeout=args.timeout,
        max_bytes=args.max_body,
        dialect=args.dialect,
        window=args.window,
        record_dir=args.record,
        sample_limit=args.sample_limit,
        instance_limit=args.instance_limit,
        redirects=args.follow_redirects,
        ca_file=args.ca_file,
        probe=args.probe,
        probe_settings=ProbeSettings(args.llamacpp_kv_layout),
    )
    host, port = args.listen
    try:
        tls_context(options.ca_file)  # a bad CA file is an error now, not at every scrape
        exporter = Exporter(targets, options)
        kv_events = kv_events_attacher(getattr(args, "kv_events", []), exporter, options, targets)
    except (OSError, ValueError) as e:
        print(f"kvscope exporter: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(exporter, host, port, kv_events))
    except OSError as e:
        print(f"kvscope exporter: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # a --kv-events socket that cannot bind or connect
        print(f"kvscope exporter: {e}", file=sys.stderr)
        return 1
    return 0
