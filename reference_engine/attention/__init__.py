"""Paged attention: the KV cache layout and storage formats, a pure-torch path (the oracle and
the CPU fast path) and Triton kernels, behind one backend interface.

May import: torch, triton (in the `triton_*` modules only) and the engine's `config`; nothing
else of the engine, which calls into this package and not the other way round.
"""
