"""The engine core, and how the API server reaches it (vLLM V1's EngineCore / EngineCoreClient).

`messages` (the protocol, msgspec structs), `engine_core` (an LLMEngine behind the protocol),
`core_loop` (the busy loop), `launch` (what a core is built from), `process` (the core
process's entry point, ZeroMQ), `client` (the client interface and the in-process thread
client), `process_client` (the client that starts and talks to a core process).

May import: the engine (scheduler, KV manager, executors, simulator), msgspec and pyzmq; not
the server, aiohttp or prometheus-client. Torch loads only where a real model is built.
"""
