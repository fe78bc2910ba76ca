"""Simulation mode: the real scheduler and block pool, with the forward pass replaced by a
cost model of a named GPU and model (stdlib only, so a laptop can rehearse a 70B on H100s)."""
