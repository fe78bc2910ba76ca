"""Tests of the paged-attention backends and KV storage formats against the torch oracle.
May import reference_engine and torch.
"""
