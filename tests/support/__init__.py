"""Helpers shared by several test folders (paths, real Prometheus, servers, stand-ins,
synthetic expositions). Each module says what it needs; those the exporter tests use are
stdlib-only.
"""
