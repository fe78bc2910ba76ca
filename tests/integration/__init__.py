"""Tests that cross packages, e.g. the exporter scraping the reference engine. May import any
kvscope package and tests.support.
"""
