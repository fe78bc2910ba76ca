"""Tests of the reference engine's HTTP server with real clients (the official openai client,
aiohttp, subprocesses). May import reference_engine and tests.support.
"""
