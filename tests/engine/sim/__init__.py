"""Tests of the simulator: cost model, sizing and trace replay. May import reference_engine."""
