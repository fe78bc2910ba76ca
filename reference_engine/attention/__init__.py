"""Paged attention: a pure-torch path (the oracle and the CPU fast path) and Triton kernels."""
