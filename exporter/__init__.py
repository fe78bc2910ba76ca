"""kvscope exporter."""
