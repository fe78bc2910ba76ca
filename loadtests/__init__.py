"""kvscope loadtests."""
