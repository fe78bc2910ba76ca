"""kvscope dashboards."""
