import os

# The Triton interpreter must be chosen before triton is imported anywhere.
os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import settings  # noqa: E402 - after the environment is set

# No per-example deadline: a 2-core CI machine under load can pause any example past
# Hypothesis's 200 ms default, which would fail a property that holds.
settings.register_profile("kvscope", deadline=None)
settings.load_profile("kvscope")
