"""The block-level view: subscribe to engines' KV cache events (vLLM's and SGLang's ZeroMQ
publishers, the bundled engine's), rebuild each instance's set of cached blocks, and derive
what metrics cannot say: which blocks are evicted and computed again, how far apart, the
prefix hit ratio more blocks would give, hot prefix chains, and blocks held by several
replicas.

Layout: `spec` (the --kv-events value), `wire` (decoding both wire eras), `stream`
(sequence numbers, gaps, replay, restarts), `blocks` (one instance's cached set and
counters), `distance` and `curve` (reuse distances and the miss-ratio curve), `chains`
(hot chains, cross-replica overlap), `subscriber` (the ZeroMQ sockets), `hub` (every
source, the per-second derivation), `collector` and `record` (metrics and JSON lines).
Only `subscriber` imports pyzmq. The model behind the curve: docs/kv-events.md.
"""
