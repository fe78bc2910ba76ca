"""Tests of the reference engine core (scheduler, block pool, KV manager, sampler, catalogue,
engine arguments) and its attention, model and sim packages. May import reference_engine and
tests.support; the fakes here stand in for the forward pass only.
"""
