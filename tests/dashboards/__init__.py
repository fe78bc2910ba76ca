"""Tests of the dashboards and alert rules: lint, real Prometheus and Grafana. May import
dashboards, the exporter (for its metric names) and tests.support.
"""
