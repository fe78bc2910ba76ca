"""An asyncio + aiohttp streaming client, the design of `vllm bench serve`: one process, one
session, N concurrent requests kept in flight (closed loop), lines read with
`async for line in resp.content`. One JSON line per request to --out.

    python -m benchmarks.peers.aiohttp_client --url URL --model M --streams 64 --duration 20 --out r.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import aiohttp

from benchmarks.peers.request import Reading, body, client_args


async def one(session: aiohttp.ClientSession, url: str, payload: bytes, out) -> None:
    reading = Reading(time.perf_counter())
    ok = False
    try:
        async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as resp:
            ok = resp.status == 200
            async for line in resp.content:
                reading.line(line, time.perf_counter())
    except (aiohttp.ClientError, asyncio.TimeoutError):
        ok = False
    out.write(reading.record(ok) + "\n")


async def stream_loop(session, url, args, deadline: float, rng: random.Random, out) -> None:
    while time.perf_counter() < deadline:
        await one(session, url, body(args.model, args.prompt_words, args.max_tokens, rng), out)


async def main_async(args: argparse.Namespace) -> None:
    url = args.url.rstrip("/") + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=args.streams)  # vLLM's raises the default limit of 100 too
    timeout = aiohttp.ClientTimeout(total=None, sock_read=300)
    deadline = time.perf_counter() + args.duration
    with open(args.out, "w", encoding="utf-8") as out:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            rng = random.Random()
            await asyncio.gather(
                *(stream_loop(session, url, args, deadline, rng, out) for _ in range(args.streams))
            )


def main() -> None:
    asyncio.run(main_async(client_args(__doc__.splitlines()[0])))


if __name__ == "__main__":
    main()
