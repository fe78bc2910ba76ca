"""Advice proven on the server: each verdict's change applied as the engine's own flags, the
server restarted with it, the same load test rerun, and the replay's prediction scored against
the measurement (`kvscope advise --verify`, `kvscope run --verify`)."""
