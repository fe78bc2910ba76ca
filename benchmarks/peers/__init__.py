"""The peer clients `benchmarks/peer_clients.py` runs next to kvscope: a plain Locust
FastHttpUser and an asyncio + aiohttp client, each writing one JSON line per request."""
