import os

# The Triton interpreter must be chosen before triton is imported anywhere.
os.environ.setdefault("TRITON_INTERPRET", "1")
