"""kvscope's CLI, load-test orchestration, analysis, reports and advisor."""
