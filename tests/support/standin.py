"""A tiny OpenAI-style SSE server for harness tests that need behaviour the real engine does
not show on demand: errors (500, 429), no usage, a broken stream, exact chunk timing.

Run as a subprocess: `python tests/support/standin.py PORT MODE [TOKEN_GAP_S]`. Modes:
ok (streams with usage and a kvscope timing object), no_usage, status_500, status_429,
mixed (every 3rd request 500, every 3rd+1 429, the rest ok), half_500 (every other request
500), broken (drops the connection mid-stream). It counts finished requests in /metrics as
vllm:request_success_total so the agreement checks work the same way as against the engine,
and every request it received as standin_requests_received_total.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from aiohttp import web

MODEL = "standin"


def _chunk(chat: bool, text: str, finish: str | None, index: int = 0) -> dict:
    choice = (
        {"index": index, "delta": {"content": text}, "finish_reason": finish}
        if chat
        else {"index": index, "text": text, "finish_reason": finish}
    )
    return {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice]}


def make_app(mode: str, gap_s: float) -> web.Application:
    counts = {"n": 0, "ok": 0}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": MODEL, "max_model_len": 4096}]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            text=(
                "# TYPE vllm:request_success_total counter\n"
                f'vllm:request_success_total{{model_name="{MODEL}",finished_reason="length"}} '
                f"{counts['ok']}\n"
                "# TYPE standin_requests_received counter\n"
                f"standin_requests_received_total {counts['n']}\n"
            )
        )

    async def generate(request: web.Request) -> web.StreamResponse:
        arrival, t0 = time.time(), time.perf_counter()
        body = await request.json()
        chat = request.path.endswith("chat/completions")
        counts["n"] += 1
        k = counts["n"]
        kind = mode
        if mode == "mixed":
            kind = "status_500" if k % 3 == 0 else "status_429" if k % 3 == 1 else "ok"
        elif mode == "half_500":
            kind = "status_500" if k % 2 == 0 else "ok"
        if kind == "status_500":
            return web.json_response({"error": {"message": "boom", "type": "server_error"}}, status=500)
        if kind == "status_429":
            return web.json_response({"error": {"message": "slow down", "type": "rate_limit"}}, status=429)
        n, max_tokens = int(body.get("n", 1)), int(body.get("max_tokens", 16))
        prompt = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        first = None
        for i in range(max_tokens):
            await asyncio.sleep(gap_s)
            if kind == "broken" and i == max_tokens // 2:
                request.transport.close()
                return resp
            first = first or time.perf_counter()
            finish = "length" if i == max_tokens - 1 else None
            for c in range(n):
                await resp.write(b"data: " + json.dumps(_chunk(chat, "tok ", finish, c)).encode() + b"\n\n")
        final: dict = {"id": "x", "choices": []}
        if kind != "no_usage" and (body.get("stream_options") or {}).get("include_usage"):
            final["usage"] = {
                "prompt_tokens": len(prompt.split()) + (7 if chat else 0),
                "completion_tokens": max_tokens * n,
                "prompt_tokens_details": {"cached_tokens": 0},
            }
        end = time.perf_counter()
        final["kvscope"] = {
            "queue_time_s": 0.0,
            "prefill_time_s": first - t0 if first else None,
            "ttft_s": first - t0 if first else None,
            "decode_time_s": end - (first or t0),
            "e2e_s": end - t0,
            "num_preemptions": 0,
            "cached_prompt_tokens": 0,
            "arrival_unix": arrival,
        }
        counts["ok"] += 1
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    return app


if __name__ == "__main__":
    port, mode = int(sys.argv[1]), sys.argv[2]
    gap = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01
    web.run_app(make_app(mode, gap), host="127.0.0.1", port=port, print=None)
