"""KV cache events in vLLM's wire format: what the block pool publishes when blocks are cached,
evicted or all cleared, and the ZeroMQ publisher that sends them (`--kv-events-config`).

`events` (the msgspec structures) and `config` (the flag's JSON) import no ZeroMQ; the
publisher imports pyzmq only when events are switched on. Facts and versions:
docs/reference/vllm-kv-events.md.
"""
