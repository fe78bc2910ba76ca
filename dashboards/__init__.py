"""kvscope's Grafana dashboards and Prometheus alert rules, generated from code (see README.md):
the panel builders, the lint rules they must pass, and the export/import commands.

May import: the standard library and its own modules; grafana-client only inside the import
command. It reads metric names as text and imports no other kvscope package.
"""
